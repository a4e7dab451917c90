"""Every algorithm, DomainBed's and its plugins', refuses an hparam name that nothing of the run
reads, naming the closest valid one, on the dataset it is built for (on any dataset when that
is not known); it accepts every name DomainBed's registry gives it there."""

import pytest
from domainbed import algorithms, datasets, hparams_registry

from dmg_domainbed.algorithms.base import PluginAlgorithm
from dmg_domainbed.errors import UserError
from dmg_domainbed.hparams import HParam, HParamSpace
from dmg_domainbed.hparams.names import reject_unknown
from dmg_domainbed.integration import ALGORITHM_GROUP, entry_points

from ..helpers import domainbed_script, one_loader_worker

OURS = sorted(entry_points(ALGORITHM_GROUP))


@pytest.mark.parametrize("name", [*OURS, "ERM", "DANN"])
def test_domainbed_s_names_on_every_dataset_are_accepted(name):
    algorithm_class = algorithms.get_algorithm_class(name)
    for dataset in datasets.DATASETS:
        dataset_class = vars(datasets)[dataset]
        for hparams in (
            hparams_registry.default_hparams(name, dataset),
            hparams_registry.random_hparams(name, dataset, 5) | {"precision": "bf16"},
        ):
            reject_unknown(algorithm_class, hparams, dataset_class)
            reject_unknown(algorithm_class, hparams)


@pytest.mark.parametrize(
    "name, misspelt, meant",
    [
        ("DMG", "lamda_overlap", "lambda_overlap"),
        ("Aggregate", "resnet_18", "resnet18"),
        ("MultiHead", "learning_rate", None),
        ("CorGrad", "n_part", "n_parts"),
        ("ImportanceMask", "phase_1_steps", "phase1_steps"),
    ],
)
def test_a_misspelt_name_stops_the_algorithm_before_it_builds_anything(name, misspelt, meant):
    hparams = hparams_registry.default_hparams(name, "RotatedDigits")
    hparams[misspelt] = 0.5
    with pytest.raises(UserError) as caught:
        algorithms.get_algorithm_class(name)((64,), 10, 3, hparams)
    message = str(caught.value)
    assert f"{name} does not know hparam '{misspelt}'" in message
    if meant:
        assert f"(did you mean '{meant}'?)" in message
    listed = message.split(f"{name}'s hparams on any dataset are: ")[1].split(", ")
    assert {"batch_size", "lr"} <= set(listed) and misspelt not in listed


def test_another_algorithm_s_domainbed_hparam_is_refused():
    hparams = hparams_registry.default_hparams("DMG", "PACS") | {"mmd_gamma": 1.0}
    with pytest.raises(UserError, match="DMG does not know hparam 'mmd_gamma'"):
        reject_unknown(algorithms.get_algorithm_class("DMG"), hparams)


class Probe(PluginAlgorithm):
    """Not registered: its names are DomainBed's generic ones and its own declarations."""

    HPARAMS = HParamSpace(HParam("probe_weight", 1.0, lambda r: 1.0, minimum=0.0))


def test_the_base_class_checks_names_before_values():
    hparams = hparams_registry.default_hparams("Probe", "VLCS") | {"probe_weight": 2.0}
    assert Probe((3, 224, 224), 5, 3, hparams).hparams["probe_weight"] == 2.0
    hparams["probe_wieght"] = hparams.pop("probe_weight")
    with pytest.raises(UserError) as caught:
        Probe((3, 224, 224), 5, 3, hparams)
    assert "Probe does not know hparam 'probe_wieght' (did you mean 'probe_weight'?)" in str(
        caught.value
    )


def test_several_unknown_names_are_named_together():
    hparams = {"lr": 1e-3, "zzz": 1, "lamda_overlap": 0.1}
    with pytest.raises(UserError) as caught:
        reject_unknown(algorithms.get_algorithm_class("DMG"), hparams)
    assert "hparams 'lamda_overlap' (did you mean 'lambda_overlap'?), 'zzz': " in str(caught.value)
    assert "defines them" in str(caught.value)


def test_a_name_is_checked_on_the_dataset_the_algorithm_is_built_for(tmp_path):
    """In train.py its --dataset's names decide. An algorithm built without train.py accepts a
    name of any dataset."""
    hparams = '{"batch_size": 8, "mlp_width": 16}'
    args = ["--algorithm", "ERM", "--dataset", "Debug28", "--hparams", hparams]
    with one_loader_worker(), pytest.raises(UserError) as caught:
        domainbed_script("train", *args, "--output_dir", str(tmp_path))
    assert "ERM does not know hparam 'mlp_width'" in str(caught.value)
    assert "(for ERM on Debug28)" in str(caught.value)
    assert not (tmp_path / "results.jsonl").exists()
    # RotatedDigits declares DomainBed's MLP widths: without the dataset, a name of some dataset
    built = hparams_registry.default_hparams("ERM", "Debug28") | {"mlp_width": 16}
    algorithms.get_algorithm_class("ERM")(datasets.Debug28.INPUT_SHAPE, 2, 2, built)


def test_what_domainbed_s_featurizer_reads_for_vectors_is_valid_on_vector_inputs():
    """networks.MLP reads mlp_width, mlp_depth and mlp_dropout, which DomainBed's registry gives
    only DANN, CDANN and ADRMX: a dataset of vectors that does not declare them needs them."""
    mlp = {"mlp_width": 16, "mlp_depth": 3, "mlp_dropout": 0.0}
    hparams = hparams_registry.default_hparams("ERM", "PACS") | mlp
    erm = algorithms.get_algorithm_class("ERM")
    reject_unknown(erm, hparams, datasets.PACS, (8,))
    with pytest.raises(UserError, match="hparams 'mlp_depth'.*'mlp_dropout'.*'mlp_width'"):
        reject_unknown(erm, hparams, datasets.PACS, (3, 224, 224))


def test_the_names_a_dataset_records_are_valid_on_that_dataset_only():
    class Recording:  # the rule reads the declaration alone
        @classmethod
        def recorded_hparams(cls):
            return {"recorded_domains": ["a", "b", "c"]}

    hparams = hparams_registry.default_hparams("DMG", "Debug28") | {"recorded_domains": ["a"]}
    dmg = algorithms.get_algorithm_class("DMG")
    reject_unknown(dmg, hparams, Recording)
    with pytest.raises(UserError, match="DMG does not know hparam 'recorded_domains'"):
        reject_unknown(dmg, hparams, datasets.Debug28)
