"""Synthetic datasets are laid out as DomainBed's downloads and load through its own dataset
classes; random weights land where torchvision, timm and the preflight look; nothing existing
is ever overwritten."""

import pytest
import torch
import torchvision
from domainbed import datasets, hparams_registry
from PIL import Image

from dmg_domainbed import synthetic
from dmg_domainbed.datasets.layouts import IMAGE_FOLDERS
from dmg_domainbed.errors import UserError
from dmg_domainbed.preflight.data import PRESENT, dataset_status
from dmg_domainbed.preflight.weights import needed_weights
from dmg_domainbed.weight_files import Caches


@pytest.mark.parametrize("dataset", sorted(synthetic.LAYOUTS))
def test_domain_folders_sort_in_the_order_of_domainbed_s_environments(dataset):
    environments = datasets.get_dataset_class(dataset).ENVIRONMENTS
    folders = sorted(synthetic.LAYOUTS[dataset].domains)
    assert len(folders) == len(environments)
    for folder, environment in zip(folders, environments):
        # DomainBed's test_envs index the sorted domain folders: "location_38" is "L38".
        assert folder.lower().replace("location_", "l").startswith(environment.lower())


def test_class_counts_are_the_datasets():
    counts = {name: len(layout.classes) for name, layout in synthetic.LAYOUTS.items()}
    assert counts == {
        "PACS": 7,
        "VLCS": 5,
        "OfficeHome": 65,
        "TerraIncognita": 10,
        "DomainNet": 345,
    }


def test_a_synthetic_pacs_loads_through_domainbed_s_image_folders(tmp_path):
    root = synthetic.write_image_dataset("PACS", tmp_path, images_per_domain=8)
    assert root == tmp_path / "PACS" and (root / synthetic.SYNTHETIC_MARKER).is_file()
    files = sorted(root.glob("*/*/*.jpg"))
    assert len(files) == 4 * 8 and all(f.name.startswith("synthetic_") for f in files)
    images = [Image.open(f) for f in files]
    assert {image.mode for image in images} == {"RGB", "L"}
    assert len({image.size for image in images}) == len(synthetic.IMAGE_SIZES)

    hparams = hparams_registry.default_hparams("ERM", "PACS")
    dataset = datasets.PACS(str(tmp_path), [0], hparams)
    assert len(dataset) == 4 and dataset.num_classes == 7
    assert [len(env) for env in dataset] == [8, 8, 8, 8]
    grayscale = next(
        i for i, f in enumerate(sorted(dataset[1].imgs)) if Image.open(f[0]).mode == "L"
    )
    x, _ = dataset[1][grayscale]  # augmented training domain
    assert x.shape == (3, 224, 224)
    found = dataset_status("PACS", "domainbed.datasets", 4, str(tmp_path))
    assert found.state == PRESENT and "SYNTHETIC" in found.detail


def test_existing_folders_are_never_overwritten(tmp_path):
    real = tmp_path / IMAGE_FOLDERS["DomainNet"] / "clipart" / "cat"
    real.mkdir(parents=True)
    (real / "photo.jpg").write_bytes(b"real")
    with pytest.raises(UserError, match="already exists and is not a synthetic DomainNet"):
        synthetic.write_image_dataset("DomainNet", tmp_path, classes=2)
    assert (real / "photo.jpg").read_bytes() == b"real"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["domain_net"]

    first = synthetic.write_image_dataset("VLCS", tmp_path, classes=2)
    stamp = (first / synthetic.SYNTHETIC_MARKER).stat().st_mtime_ns
    assert synthetic.write_image_dataset("VLCS", tmp_path, classes=2) == first
    assert (first / synthetic.SYNTHETIC_MARKER).stat().st_mtime_ns == stamp
    with pytest.raises(UserError, match="already exists"):
        synthetic.write_image_dataset("VLCS", tmp_path, classes=3)


def test_bad_requests_are_refused(tmp_path):
    with pytest.raises(UserError, match="synthetic folders can be written for PACS, VLCS"):
        synthetic.write_image_dataset("ColoredMNIST", tmp_path)
    with pytest.raises(UserError, match="at least one image per class"):
        synthetic.write_image_dataset("PACS", tmp_path, images_per_domain=3)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("batch_size, holdout, classes", [(2, 0.2, 1), (2, 0.5, 2), (32, 0.2, 7)])
def test_images_needed_fill_one_batch_and_a_held_out_split(batch_size, holdout, classes):
    n = synthetic.images_needed(batch_size, holdout, classes)

    def runs(count: int) -> bool:  # train.py's split: int(n * holdout) images held out
        held_out = int(count * holdout)
        return held_out >= 1 and count - held_out >= batch_size and count >= classes

    assert runs(n) and not runs(n - 1)


def test_random_weights_are_what_torchvision_loads_and_what_the_preflight_finds(
    tmp_path, monkeypatch
):
    caches = Caches.under(tmp_path / "cache")
    hparams = {"resnet18": True, "resnet50_augmix": False}
    files, _ = needed_weights(hparams, synthetic.IMAGE_SHAPE, caches)
    (written,) = synthetic.write_random_weights(files, seed=3)
    assert written == files[0].path
    assert [f.present for f in needed_weights(hparams, synthetic.IMAGE_SHAPE, caches)[0]] == [True]

    monkeypatch.setenv("TORCH_HOME", caches.environment()["TORCH_HOME"])
    loaded = torchvision.models.resnet18(weights="IMAGENET1K_V1")  # DomainBed's pretrained=True
    torch.manual_seed(3)
    assert torch.equal(loaded.conv1.weight, torchvision.models.resnet18().conv1.weight)

    with pytest.raises(UserError, match="never replace"):
        synthetic.write_random_weights([files[0]])  # listed as missing, but the file is there
    assert synthetic.write_random_weights(needed_weights(hparams, (3, 224, 224), caches)[0]) == []


def test_a_hugging_face_cache_pointing_elsewhere_is_left_alone(tmp_path):
    caches = Caches.under(tmp_path)
    files, _ = needed_weights({"resnet50_augmix": True}, synthetic.IMAGE_SHAPE, caches)
    timm_file = files[1]
    (timm_file.folder / "refs").mkdir(parents=True)
    (timm_file.folder / "refs" / "main").write_text("0" * 40)
    with pytest.raises(UserError, match="points at another revision"):
        synthetic.write_random_weights([timm_file])
    assert (timm_file.folder / "refs" / "main").read_text() == "0" * 40
    assert not (timm_file.folder / "snapshots").exists()
