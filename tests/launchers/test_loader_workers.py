"""DMG_DOMAINBED_LOADER_WORKERS: a budget of data-loader workers per job, split over the
training domains of each DomainBed dataset, never above the dataset's own number."""

import pytest

from dmg_domainbed import integration


@pytest.fixture
def datasets():
    from domainbed import datasets

    yield datasets
    integration.cap_loader_workers(datasets, {})


def workers(datasets) -> dict[str, int]:
    names = ("PACS", "DomainNet", "Debug28", "RotatedMNIST", "RotatedDigits")
    return {name: getattr(datasets, name).N_WORKERS for name in names}


def test_the_budget_is_split_over_the_training_domains(datasets):
    integration.cap_loader_workers(datasets, {})
    assert workers(datasets) == {
        "PACS": 8,  # DomainBed's own numbers when unset
        "DomainNet": 8,
        "Debug28": 8,
        "RotatedMNIST": 8,
        "RotatedDigits": 0,
    }
    integration.cap_loader_workers(datasets, {"DMG_DOMAINBED_LOADER_WORKERS": "4"})
    assert workers(datasets) == {
        "PACS": 1,  # 4 domains: 3 training loaders
        "DomainNet": 1,  # 6 domains: never below 1
        "Debug28": 2,  # 3 domains
        "RotatedMNIST": 1,  # 6 domains
        "RotatedDigits": 0,  # its own 0 stays
    }
    integration.cap_loader_workers(datasets, {"DMG_DOMAINBED_LOADER_WORKERS": "60"})
    assert workers(datasets)["PACS"] == 8  # never above DomainBed's own number
    integration.cap_loader_workers(datasets, {"DMG_DOMAINBED_LOADER_WORKERS": "0"})
    assert workers(datasets)["PACS"] == 1


def test_a_dataset_defined_after_a_cap_starts_from_its_own_number(datasets):
    integration.cap_loader_workers(datasets, {"DMG_DOMAINBED_LOADER_WORKERS": "3"})

    class LatePACS(datasets.PACS):
        pass

    integration.cap_loader_workers(datasets, {"DMG_DOMAINBED_LOADER_WORKERS": "9"})
    assert LatePACS.N_WORKERS == datasets.PACS.N_WORKERS == 3


def test_a_bad_value_is_reported_and_ignored(datasets, capsys):
    integration.cap_loader_workers(datasets, {"DMG_DOMAINBED_LOADER_WORKERS": "many"})
    assert datasets.PACS.N_WORKERS == 8
    assert "DMG_DOMAINBED_LOADER_WORKERS='many' is not a whole number" in capsys.readouterr().err
