"""The real image path: the algorithms train through DomainBed's own train script on PACS- and
DomainNet-shaped folders with ResNet-18 and ResNet-50 loaded by DomainBed's pretrained path; the
saved models reload; DMG's masks sit on the real featurizer's channels; evaluate and the mask
pictures work on the runs."""

import json
import math
import shutil

import pandas as pd
import pytest
import timm
import torch
import torchvision
from domainbed import algorithms, datasets

from tests.helpers import cli

from .conftest import BACKBONES, BATCH_SIZE, CLASSES, RUNS, steps

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def reload(run):
    """The run's model.pkl rebuilt as DomainBed's scripts rebuild it."""
    checkpoint = torch.load(run / "model.pkl", weights_only=False)
    algorithm = algorithms.get_algorithm_class(checkpoint["args"]["algorithm"])(
        checkpoint["model_input_shape"],
        checkpoint["model_num_classes"],
        checkpoint["model_num_domains"],
        checkpoint["model_hparams"],
    )
    algorithm.load_state_dict(checkpoint["model_dict"])
    return algorithm.eval(), checkpoint


def test_image_runs(image_path, image_runs):
    """Every run finished its steps (a failed run shows its traceback here)."""
    failed = {
        f"{backbone} {algorithm}": (run / "worker_error.txt").read_text()[-3000:]
        for (backbone, algorithm), run in image_runs.items()
        if (run / "worker_error.txt").exists() or not (run / "done").exists()
    }
    assert not failed, "\n\n".join(f"{name}:\n{error}" for name, error in failed.items())


@pytest.mark.parametrize("backbone, algorithm", RUNS)
def test_every_algorithm_trains_and_reloads(image_runs, offline_caches, backbone, algorithm):
    run = image_runs[(backbone, algorithm)]
    assert (run / "done").exists(), (run / "err.txt").read_text()[-3000:]
    records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert [record["step"] for record in records] == list(range(steps(algorithm)))
    assert all(math.isfinite(record["loss"]) for record in records)
    hparams = records[-1]["hparams"]
    assert {k: hparams[k] for k in BACKBONES[backbone].hparams} == BACKBONES[backbone].hparams
    assert hparams["batch_size"] == BATCH_SIZE

    model, checkpoint = reload(run)
    dataset = datasets.get_dataset_class(checkpoint["args"]["dataset"])(
        checkpoint["args"]["data_dir"], [0], checkpoint["model_hparams"]
    )
    x = torch.stack([dataset[0][i][0] for i in range(2)])  # held-out domain, 224x224
    with torch.no_grad():
        logits = model.predict(x)
    assert logits.shape == (2, CLASSES) and torch.isfinite(logits).all()


@pytest.mark.parametrize("backbone", BACKBONES)
def test_dmg_masks_one_value_per_channel_of_the_real_resnet(image_runs, offline_caches, backbone):
    model, checkpoint = reload(image_runs[(backbone, "DMG")])
    resnet = model.network.featurizer.network
    assert isinstance(
        resnet, timm.models.ResNet if backbone == "resnet50" else torchvision.models.ResNet
    )
    assert model.masks.layer_names == [
        "featurizer.network.layer3",
        "featurizer.network.layer4",
        "classifier",
    ]
    domains = checkpoint["model_num_domains"]
    units = BACKBONES[backbone].mask_units
    assert [tuple(logits.shape) for logits in model.masks.logits] == [(domains, u) for u in units]

    # The input layer3 receives is layer2's output scaled per channel by the domain's mask.
    seen = {}
    resnet.layer2.register_forward_hook(lambda m, i, out: seen.setdefault("layer2", out))
    resnet.layer3.register_forward_pre_hook(lambda m, args: seen.setdefault("layer3", args[0]))
    domain = domains - 1
    with torch.no_grad(), model.masks.per_example(torch.tensor([domain]), mode="soft"):
        model.network(torch.randn(1, 3, 224, 224))
    mask = torch.sigmoid(model.masks.logits[0][domain]).view(1, -1, 1, 1)
    assert seen["layer3"].shape[1] == units[0] and seen["layer3"].shape[2:] == (28, 28)
    torch.testing.assert_close(seen["layer3"], seen["layer2"] * mask)


def test_evaluate_classifies_the_held_out_images_unaugmented(
    image_runs, offline_caches, tmp_path, monkeypatch
):
    # A few tiny images: load them in this process, as the trainings did (train_worker.py).
    classes = [datasets.MultipleDomainDataset]
    for cls in classes:
        monkeypatch.setattr(cls, "N_WORKERS", 0)
        classes += cls.__subclasses__()
    runs = [image_runs[("resnet18", name)] for name in ("Aggregate", "MultiHead", "DMG")]
    code, printed, _ = cli("evaluate", "--run_dir", *map(str, runs), "--output_dir", str(tmp_path))
    assert code == 0
    # train.py evaluated the training domains' held-out images with random augmentation
    # (DomainBed's default data_augmentation): those numbers are not a reference.
    assert "classified without augmentation" in printed and "WARNING" not in printed
    table = pd.read_csv(tmp_path / "in_domain.csv")
    assert table["logged"].isna().all()
    assert set(table["prediction"]) == {
        "Aggregate (predict)",
        "MultiHead (predict)",
        "MultiHead-KnownDomain, own head",
        "DMG (predict)",
        "DMG-KnownDomain, soft masks",
        "DMG-KnownDomain, hard masks",
    }
    # DomainNet's source domains, clip held out
    assert set(table["domain"]) == {"info", "paint", "quick", "real", "sketch"}

    code, _, _ = cli(
        "evaluate", "--run_dir", str(runs[-1]), "--output_dir", str(tmp_path / "again")
    )
    again = pd.read_csv(tmp_path / "again" / "in_domain.csv")
    dmg = table[table["algorithm"] == "DMG"].reset_index(drop=True)
    pd.testing.assert_frame_equal(again.drop(columns="run"), dmg.drop(columns="run"))


def test_mask_pictures_of_conv_masks(image_runs, offline_caches, tmp_path):
    run = image_runs[("resnet50", "DMG")]
    code, printed, _ = cli("masks", "--run_dir", str(run), "--output_dir", str(tmp_path / "dmg"))
    assert code == 0 and "mean_hard_iou" in printed
    assert (tmp_path / "dmg" / "masks.png").read_bytes().startswith(PNG_SIGNATURE)
    probabilities = pd.read_csv(tmp_path / "dmg" / "masks_probabilities.csv")
    units = probabilities.groupby("layer", sort=False).size().to_dict()
    source_domains = 3  # PACS with test domain 0 held out
    assert units == {
        "featurizer.network.layer3": 512 * source_domains,
        "featurizer.network.layer4": 1024 * source_domains,
        "classifier": 2048 * source_domains,
    }

    run = image_runs[("resnet18", "ImportanceMask")]
    code, _, _ = cli("masks", "--run_dir", str(run), "--output_dir", str(tmp_path / "importance"))
    assert code == 0
    assert (tmp_path / "importance" / "masks.png").read_bytes().startswith(PNG_SIGNATURE)


def test_evaluate_refuses_a_copy_of_domainbed_s_dataset_that_changed(
    image_runs, image_path, offline_caches, tmp_path
):
    """DomainBed's records tell how many classes a run's model predicts (model.pkl) and how
    large its smallest training split was (train.py's epoch at a step after 0): a copy of the
    data that differs in either is refused before the model is scored on it. The ImportanceMask
    run logged a second step; DomainNet's 3 images a domain, half held out, train on 2."""
    run = image_runs[("resnet18", "ImportanceMask")]
    source = image_path.data_dir / "domain_net"

    def copy(name):
        shutil.copytree(source, tmp_path / name / "domain_net")
        return tmp_path / name / "domain_net"

    fewer = copy("fewer")  # one image less in one domain: 1 to train on there
    (clipart,) = [c for c in (fewer / "clipart").iterdir() if len(list(c.iterdir())) > 1]
    next(clipart.iterdir()).unlink()
    more = copy("more")  # a third class, an image in every domain
    for domain in more.iterdir():
        if domain.is_dir():
            (domain / "zigzag").mkdir()
            shutil.copy(next(domain.rglob("*.jpg")), domain / "zigzag" / "one.jpg")
    expected = {
        fewer: "its smallest training split (train.py's in-split) held 2 images, today 1",
        more: "predicts 2 classes from inputs of shape (3, 224, 224); the dataset gives 3 classes",
    }
    for data, message in expected.items():
        output = tmp_path / f"evaluated_{data.parent.name}"
        code, _, err = cli(
            "evaluate",
            "--run_dir",
            str(run),
            "--data_dir",
            str(data.parent),
            "--output_dir",
            str(output),
        )
        assert code == 2 and "whose data changed since it trained" in err and message in err
        assert not output.exists()
