"""DomainBed's own test modules hold every algorithm this package registers to its contract.

``domainbed/test/test_models.py`` builds each algorithm of ``ALGORITHMS`` on a debug dataset
with its default hparams, runs three updates of 8 images per domain and checks the shape of
``predict``; ``test_hparams_registry.py`` checks that every algorithm's random hparams are
deterministic on every dataset. Both are run here as DomainBed ships them, their unittest cases
in this process, selected to this package's algorithms (DomainBed's own algorithms are
DomainBed's business; ``test_integration`` checks the plugin leaves their hparams unchanged), on
the CPU where there is no GPU (:func:`cuda_optional`).

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
import unittest

import pytest
import torch
from domainbed import datasets
from domainbed.test import helpers, test_hparams_registry, test_models

from dmg_domainbed import integration

from ..helpers import cli, package_plugins, random_weight_cache, read_weights_from

OURS = package_plugins(integration.ALGORITHM_GROUP)


def parameters(method) -> dict[str, str]:
    """The parameters parameterized.expand gave a generated test, read from the docstring it
    writes them into (``... [with algorithm_name='X', dataset_name='Y']``)."""
    return dict(re.findall(r"(\w+)='([^']*)'", method.__doc__.split("[with ", 1)[1]))


def cases(test_class: type) -> dict[str, list[unittest.TestCase]]:
    """The generated tests of ``test_class``, by algorithm."""
    found: dict[str, list[unittest.TestCase]] = {}
    for name in dir(test_class):
        method = getattr(test_class, name)
        if name.startswith("test_") and "[with " in (method.__doc__ or ""):
            found.setdefault(parameters(method)["algorithm_name"], []).append(test_class(name))
    return found


MODELS = cases(test_models.TestAlgorithms)
HPARAMS = cases(test_hparams_registry.TestHparamsRegistry)


def dataset_of(case: unittest.TestCase) -> str:
    return parameters(getattr(case, case._testMethodName))["dataset_name"]


def in_test_models(algorithm: str, case: unittest.TestCase) -> bool:
    """Whether DomainBed's ``test_models`` case runs here (see the module's docstring)."""
    return algorithm != "SFMOE" and dataset_of(case) == "Debug28"


def outcomes(selected: list[unittest.TestCase]) -> dict[str, str]:
    """Run DomainBed's unittest cases here: ``{test: 'passed' or what went wrong}``."""
    results = {}
    for case in selected:
        result = unittest.TestResult()
        case.run(result)
        problems = [*result.failures, *result.errors, *result.skipped]
        results[case.id()] = "passed" if not problems else problems[0][1]
    return results


@pytest.fixture
def cuda_optional(monkeypatch):
    """Without a GPU, ``.cuda()`` of a module or a tensor returns it unchanged: DomainBed's
    ``test_models`` moves every algorithm and minibatch to the GPU unconditionally. Where a GPU
    is present nothing changes."""
    if not torch.cuda.is_available():
        monkeypatch.setattr(torch.nn.Module, "cuda", lambda self, device=None: self)
        monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *args, **kwargs: self)


def test_every_algorithm_of_the_package_is_in_domainbeds_test_modules():
    assert OURS == ["Aggregate", "CorGrad", "DMG", "ImportanceMask", "MultiHead", "SFMOE"]
    for algorithm in OURS:
        tested = sorted(dataset_of(case) for case in MODELS[algorithm])
        assert tested == sorted(helpers.DEBUG_DATASETS)
        assert len(HPARAMS[algorithm]) == len(datasets.DATASETS)


@pytest.mark.parametrize("algorithm", [a for a in OURS if a != "SFMOE"])
def test_init_update_predict_on_domainbeds_debug28(cuda_optional, algorithm):
    results = outcomes([case for case in MODELS[algorithm] if in_test_models(algorithm, case)])
    assert results and set(results.values()) == {"passed"}, results


def test_check_algorithm_passes_every_algorithm_of_the_package_and_erm(tmp_path, monkeypatch):
    """DomainBed's test_models on Debug28 and more: update returns floats, predict is
    repeatable, the state dict reloads, .to(device) moves every tensor, hparams per seed."""
    read_weights_from(monkeypatch, random_weight_cache(tmp_path / "cache", deit=True))
    names = ["ERM", *OURS]
    code, printed, err = cli("check-algorithm", *names, "--images_per_domain", "2")
    verdicts = dict(re.findall(r"^  (\w+): (passed|FAILED.*)$", printed, flags=re.M))
    assert verdicts == dict.fromkeys(names, "passed"), printed + err
    assert code == 0


@pytest.mark.parametrize("algorithm", OURS)
def test_random_hparams_are_deterministic_on_every_dataset(algorithm):
    results = outcomes(HPARAMS[algorithm])
    assert results and set(results.values()) == {"passed"}, results
