"""This package's algorithms refuse an hparam name that nothing reads, naming the closest valid
one, and accept every name DomainBed's registry gives them on any dataset."""

import pytest
from domainbed import algorithms, datasets, hparams_registry

from dmg_domainbed.algorithms.base import PluginAlgorithm
from dmg_domainbed.errors import UserError
from dmg_domainbed.hparams import HParam, HParamSpace, reject_unknown
from dmg_domainbed.integration import ALGORITHM_GROUP, entry_points

OURS = sorted(entry_points(ALGORITHM_GROUP))


@pytest.mark.parametrize("name", OURS)
def test_domainbed_s_names_on_every_dataset_are_accepted(name):
    algorithm_class = algorithms.get_algorithm_class(name)
    for dataset in datasets.DATASETS:
        reject_unknown(algorithm_class, hparams_registry.default_hparams(name, dataset))
        reject_unknown(algorithm_class, hparams_registry.random_hparams(name, dataset, 5))


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
    listed = message.split(f"{name}'s hparams are: ")[1].split(", ")
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
