"""The real image path with DomainBed's default backbone: DMG trains through DomainBed's own
train script on a PACS-shaped folder with ResNet-50 loaded by DomainBed's pretrained path; the
saved model reloads; DMG's masks sit on the real featurizer's channels; the mask pictures work
on the run."""

import json
import math
import shutil

import pandas as pd
import timm
import torch

from tests.helpers import assert_masks_on_resnet_channels, cli, held_out_logits, reload

from .conftest import BATCH_SIZE, CLASSES, DATASET, MASK_UNITS, RESNET50, STEPS

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_dmg_trains_on_resnet50_and_reloads(image_run, offline_caches):
    run = image_run
    assert (run / "done").exists(), (run / "err.txt").read_text()[-3000:]
    records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert [record["step"] for record in records] == list(range(STEPS))
    assert all(math.isfinite(record["loss"]) for record in records)
    hparams = records[-1]["hparams"]
    assert {k: hparams[k] for k in RESNET50} == RESNET50
    assert hparams["batch_size"] == BATCH_SIZE

    logits, _ = held_out_logits(run, 0)  # held-out domain, 224x224
    assert logits.shape == (2, CLASSES) and torch.isfinite(logits).all()


def test_dmg_masks_one_value_per_channel_of_the_real_resnet50(image_run, offline_caches):
    model, checkpoint = reload(image_run)
    assert isinstance(model.network.featurizer.network, timm.models.ResNet)
    assert_masks_on_resnet_channels(model, checkpoint["model_num_domains"], MASK_UNITS)


def test_mask_pictures_of_conv_masks(image_run, offline_caches, tmp_path):
    code, printed, _ = cli("masks", "--run_dir", str(image_run), "--output_dir", str(tmp_path))
    assert code == 0 and "mean_hard_iou" in printed
    assert (tmp_path / "masks.png").read_bytes().startswith(PNG_SIGNATURE)
    probabilities = pd.read_csv(tmp_path / "masks_probabilities.csv")
    units = probabilities.groupby("layer", sort=False).size().to_dict()
    source_domains = 3  # PACS with test domain 0 held out
    assert units == {
        "featurizer.network.layer3": 512 * source_domains,
        "featurizer.network.layer4": 1024 * source_domains,
        "classifier": 2048 * source_domains,
    }


def test_evaluate_refuses_a_copy_of_domainbed_s_dataset_that_changed(
    image_run, image_path, offline_caches, tmp_path
):
    """DomainBed's records tell how many classes a run's model predicts (model.pkl) and how
    large its smallest training split was (train.py's epoch at a step after 0): a copy of the
    data that differs in either is refused before the model is scored on it. PACS's 3 images a
    domain, half held out, train on 2."""
    source = image_path.data_dir / DATASET

    def copy(name):
        shutil.copytree(source, tmp_path / name / DATASET)
        return tmp_path / name / DATASET

    fewer = copy("fewer")  # one image less in a training domain: 1 to train on there
    (cartoon,) = [c for c in (fewer / "cartoon").iterdir() if len(list(c.iterdir())) > 1]
    next(cartoon.iterdir()).unlink()
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
            *("--run_dir", str(image_run), "--data_dir", str(data.parent)),
            *("--output_dir", str(output)),
        )
        assert code == 2 and "whose data changed since it trained" in err and message in err
        assert not output.exists()
