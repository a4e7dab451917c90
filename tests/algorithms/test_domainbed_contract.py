"""DomainBed's own test modules hold every algorithm this package registers to its contract.

``domainbed/test/test_models.py`` builds each algorithm of ``ALGORITHMS`` on a debug dataset
with its default hparams, runs three updates of 8 images per domain and checks the shape of
``predict``; ``test_hparams_registry.py`` checks that every algorithm's random hparams are
deterministic on every dataset. Both are run here as DomainBed ships them, by pytest in one
process of their own, selected to this package's algorithms (DomainBed's own algorithms are
DomainBed's business; ``test_integration`` checks the plugin leaves their hparams unchanged), on
the CPU where there is no GPU (:mod:`.cuda_optional`).

``test_models`` runs on ``Debug28``. Its ``Debug224`` cases differ only in the backbone, which
other tests build and train through DomainBed's own ``train.py`` at 224x224 from pretrained
weight files: every algorithm on ResNet-18 (and SFMOE's DeiT-S) in the combination matrix
(``tests/test_combinations.py``), DMG on ResNet-50 in ``tests/image_path``. SFMOE always runs
its DeiT-S at 224x224, so on ``Debug28`` its ``test_models`` case is as costly as a
``Debug224`` one: what it checks, and more, is checked once, by ``dmg-domainbed
check-algorithm`` below, which runs ``test_models``' steps on ``Debug28`` for this package's
algorithms and ERM. The DeiT-S weights are random files
that :mod:`dmg_domainbed.synthetic` writes into a cache of the test's own, read by the loaders'
own code with no network.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
from domainbed import datasets
from domainbed.test import helpers, test_hparams_registry, test_models

from dmg_domainbed import integration

from ..helpers import domainbed_env, package_plugins, random_weight_cache, run_python

REPOSITORY = Path(__file__).resolve().parents[2]
OURS = package_plugins(integration.ALGORITHM_GROUP)


def parameters(method) -> dict[str, str]:
    """The parameters parameterized.expand gave a generated test, read from the docstring it
    writes them into (``... [with algorithm_name='X', dataset_name='Y']``)."""
    return dict(re.findall(r"(\w+)='([^']*)'", method.__doc__.split("[with ", 1)[1]))


def node_ids(module, test_class: type) -> dict[str, list[str]]:
    """pytest ids of the generated tests of ``test_class`` in ``module``, by algorithm."""
    ids: dict[str, list[str]] = {}
    for name in dir(test_class):
        method = getattr(test_class, name)
        if name.startswith("test_") and "[with " in (method.__doc__ or ""):
            algorithm = parameters(method)["algorithm_name"]
            ids.setdefault(algorithm, []).append(
                f"{module.__file__}::{test_class.__name__}::{name}"
            )
    return ids


MODELS = node_ids(test_models, test_models.TestAlgorithms)
node_datasets = {
    node: parameters(getattr(test_models.TestAlgorithms, node.rsplit("::", 1)[1]))["dataset_name"]
    for nodes in MODELS.values()
    for node in nodes
}
HPARAMS = node_ids(test_hparams_registry, test_hparams_registry.TestHparamsRegistry)


@pytest.fixture(scope="module")
def weights_env(tmp_path_factory) -> dict[str, str]:
    """The environment of a process that finds random weights in every file the algorithms
    load, and no network."""
    # the DeiT-S file SFMOE loads; on Debug28 no other algorithm loads a weight file
    caches = random_weight_cache(tmp_path_factory.mktemp("weights") / "cache", deit=True)
    return domainbed_env(**caches.environment(), HF_HUB_OFFLINE="1", PYTHONPATH=str(REPOSITORY))


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory, weights_env) -> dict[str, str]:
    """Run the selected DomainBed tests; ``{node id: 'passed' or what went wrong}``."""
    root = tmp_path_factory.mktemp("domainbed_tests")
    selected = [
        node
        for algorithm in OURS
        for node in MODELS[algorithm] + HPARAMS[algorithm]
        if node not in MODELS[algorithm] or in_test_models(algorithm, node)
    ]
    report = root / "report.xml"
    (root / "pytest.ini").write_text("[pytest]\n")  # none of this project's pytest options
    env = weights_env
    ran = run_python(
        "-m",
        "pytest",
        "-c",
        str(root / "pytest.ini"),
        "--rootdir",
        str(root),
        "-p",
        "tests.algorithms.cuda_optional",
        "-p",
        "no:cacheprovider",
        "-q",
        f"--junitxml={report}",
        *selected,
        cwd=root,
        env=env,
        check=False,
    )
    if not report.is_file():
        pytest.fail(f"DomainBed's tests did not run:\n{ran.stdout}\n{ran.stderr}")
    results = {}
    for case in ElementTree.parse(report).iter("testcase"):
        problems = [child for child in case if child.tag in ("failure", "error", "skipped")]
        results[case.get("name")] = (
            "passed" if not problems else f"{problems[0].tag}: {problems[0].get('message')}"
        )
    return results


def in_test_models(algorithm: str, node: str) -> bool:
    """Whether DomainBed's ``test_models`` case ``node`` runs here (see the module's docstring)."""
    return algorithm != "SFMOE" and node_datasets[node] == "Debug28"


def outcome_of(outcomes: dict[str, str], node: str) -> str:
    return outcomes.get(node.rsplit("::", 1)[1], "not run")


def test_every_algorithm_of_the_package_is_in_domainbeds_test_modules():
    assert OURS == ["Aggregate", "CorGrad", "DMG", "ImportanceMask", "MultiHead", "SFMOE"]
    for algorithm in OURS:
        cases = [
            parameters(getattr(test_models.TestAlgorithms, n.rsplit("::", 1)[1]))
            for n in MODELS[algorithm]
        ]
        assert sorted(case["dataset_name"] for case in cases) == sorted(helpers.DEBUG_DATASETS)
        assert len(HPARAMS[algorithm]) == len(datasets.DATASETS)


@pytest.mark.parametrize("algorithm", [a for a in OURS if a != "SFMOE"])
def test_init_update_predict_on_domainbeds_debug28(outcomes, algorithm):
    results = {
        node: outcome_of(outcomes, node)
        for node in MODELS[algorithm]
        if in_test_models(algorithm, node)
    }
    assert results and set(results.values()) == {"passed"}, results


def test_check_algorithm_passes_every_algorithm_of_the_package_and_erm(weights_env):
    """DomainBed's test_models on Debug28 and more: update returns floats, predict is
    repeatable, the state dict reloads, .to(device) moves every tensor, hparams per seed."""
    names = ["ERM", *OURS]
    ran = run_python(
        "-m",
        "dmg_domainbed",
        "check-algorithm",
        *names,
        "--images_per_domain",
        "2",
        env=weights_env,
        check=False,
    )
    verdicts = dict(re.findall(r"^  (\w+): (passed|FAILED.*)$", ran.stdout, flags=re.M))
    assert verdicts == dict.fromkeys(names, "passed"), ran.stdout + ran.stderr
    assert ran.returncode == 0


@pytest.mark.parametrize("algorithm", OURS)
def test_random_hparams_are_deterministic_on_every_dataset(outcomes, algorithm):
    results = {node: outcome_of(outcomes, node) for node in HPARAMS[algorithm]}
    assert set(results.values()) == {"passed"}, results
