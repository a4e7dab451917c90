"""Every algorithm on every kind of dataset in both precisions, and averaged: the matrix.

Each feature has its own tests; here they meet, so that a feature that breaks another shows. A
cell is one algorithm (ERM and every algorithm this package registers) on one kind of dataset
(the embedded RotatedDigits; a manifest of class folders; a manifest with a CSV of labels;
DomainBed's own PACS on generated JPEG folders, read by DomainBed's loaders) in fp32 or bf16; and
every algorithm on one kind in bf16 with its weights averaged (``averaging``), whose code is the
same on every kind but for the weights' layout, which bf16 sets on images. It
trains through DomainBed's own, unmodified ``train.py``; ``evaluate`` then classifies the run's
held-out images and ``masks`` draws what it learned (and refuses, clearly, an algorithm that
draws nothing). An algorithm that cannot take a kind's inputs is refused before anything is
trained, and its cell asserts that refusal.

The process is not what is tested here: everything runs in this one, train.py as ``__main__``
and the CLI's ``main``, with one data-loader worker per loader (what a job gets under
``DMG_DOMAINBED_LOADER_WORKERS=1``). Each cell takes the cheapest real path: one step (two for
ImportanceMask, whose phase 2 starts after its first), one image per domain in a batch, the
fewest images that give every split of every domain one batch, each kind's smallest input that
selects its network (DomainBed's MLP on 64 features, MNIST_CNN at 28x28, Wide ResNet at 32x32,
ResNet-18 at 224x224; SFMOE runs its DeiT-S at 224x224 whatever the input), and random weights
in the very cache files DomainBed's and SFMOE's loaders read.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import torch
import torchvision
from domainbed import algorithms, datasets

from dmg_domainbed import integration, synthetic
from dmg_domainbed.algorithms.base import declarations_of
from dmg_domainbed.errors import UserError
from dmg_domainbed.reporting.jobs import precision as precision_of
from dmg_domainbed.reporting.jobs import reported_names

from .datasets.conftest import write_domains
from .helpers import (
    assert_masks_on_resnet_channels,
    cli,
    domainbed_script,
    held_out_logits,
    one_loader_worker,
    package_plugins,
    random_weight_cache,
    read_weights_from,
    register_manifests,
    reload,
)

pytestmark = pytest.mark.slow  # real training in every cell: the full suite and CI run them

# --- The axes -------------------------------------------------------------------------------

ALGORITHMS = ("ERM", *package_plugins(integration.ALGORITHM_GROUP))
PRECISIONS = ("fp32", "bf16")  # fp32: no precision hparam at all, as users run by default
# averaging: "none" is no averaging hparam at all; "sma" averages from the first step, so that a
# one-step run evaluates and saves an average (ImportanceMask's, after its phase-1 step, restarts)
AVERAGINGS = {"none": {}, "sma": {"averaging": "sma", "averaging_start": 0}}


@dataclass(frozen=True)
class Kind:
    """A kind of dataset: the DomainBed dataset of its cells and the featurizer its inputs
    select (DomainBed's class), which ``hparams`` settle where there is a choice."""

    dataset: str
    network: str
    hparams: dict  # what its cells add to every run's --hparams


RESNET18 = {"resnet18": True, "resnet50_augmix": False}
KINDS = {
    "embedded": Kind("RotatedDigits", "MLP", {}),  # 64 features
    "manifest_folders": Kind("MatrixFolders", "MNIST_CNN", {}),  # 28x28
    "manifest_csv": Kind("MatrixCsv", "Wide_ResNet", {}),  # 32x32
    "domainbed_images": Kind("PACS", "ResNet", RESNET18),  # 224x224, ResNet-18
}
# (algorithm, kind) -> the start of the error the algorithm refuses the kind's inputs with.
REFUSED = {
    ("SFMOE", "embedded"): "SFMOE runs a 224x224 vision transformer on images with 3 (RGB) or 1",
}

# --- The runs' size ---------------------------------------------------------------------------

# Two steps for ImportanceMask: it ends phase 1 after one step, so its second step and saved
# model are phase 2. train.py evaluates every split at step 0 and at the last step.
STEPS = {"ImportanceMask": 2}
BATCH_SIZE, HOLDOUT_FRACTION, CLASSES = 1, 0.5, 2
IMAGES_PER_DOMAIN = synthetic.images_needed(BATCH_SIZE, HOLDOUT_FRACTION, CLASSES)
TEST_ENV = 0
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def steps(algorithm: str) -> int:
    return STEPS.get(algorithm, 1)


def run_hparams(algorithm: str, kind: str, precision: str, averaging: str = "none") -> dict:
    """The --hparams of a cell: the tiny batch, its kind's, the algorithm's own sized for the
    run's length (as sweep files and the demo size them), bf16 and averaging where asked."""
    sized = declarations_of(algorithms.get_algorithm_class(algorithm)).run_length_hparams
    hparams = {"batch_size": BATCH_SIZE, **KINDS[kind].hparams, **sized(steps(algorithm))}
    hparams |= {"precision": "bf16"} if precision == "bf16" else {}
    return hparams | AVERAGINGS[averaging]


# Every algorithm on every kind in both precisions, unaveraged; every algorithm averaged on the
# cheapest kind of images, in bf16, but SFMOE, whose state is averaged as any other's (its own
# test trains it averaged through train.py: tests/test_averaging.py) and whose cell costs as
# much as the others together.
CELLS = [
    *((a, kind, p, "none") for a in ALGORITHMS for kind in KINDS for p in PRECISIONS),
    *((a, "manifest_folders", "bf16", "sma") for a in ALGORITHMS if a != "SFMOE"),
]


# --- The datasets and weights -----------------------------------------------------------------


def write_manifests(root: Path) -> list[Path]:
    """The two manifest kinds over one folder of three domains of two classes: one reads the
    class folders (28x28 inputs), one a CSV of path, label and domain (32x32 inputs)."""
    images = write_domains(root / "images", per_class=IMAGES_PER_DOMAIN // CLASSES)
    rows = [
        f"{path.relative_to(images)},{path.parent.name},{path.parent.parent.name}"
        for path in sorted(images.rglob("*.png"))
    ]
    (root / "labels.csv").write_text("path,label,domain\n" + "\n".join(rows) + "\n")
    folders, listed = root / "folders.toml", root / "listed.toml"
    folders.write_text('name = "MatrixFolders"\nroot = "images"\ninput_size = 28\n')
    listed.write_text('name = "MatrixCsv"\nroot = "images"\ncsv = "labels.csv"\ninput_size = 32\n')
    return [folders, listed]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """Every kind's data, registered in this process, and random weights where loaders look.

    RotatedDigits needs no files; the manifests are registered as importing DomainBed registers
    them; PACS is a synthetic copy in DomainBed's layout, two of its classes."""
    root = tmp_path_factory.mktemp("combinations")
    caches = random_weight_cache(root / "cache", backbones=[RESNET18], deit=True)
    synthetic.write_image_dataset(
        "PACS", root / "data", images_per_domain=IMAGES_PER_DOMAIN, classes=CLASSES
    )
    with pytest.MonkeyPatch.context() as patch:
        read_weights_from(patch, caches)
        names = register_manifests(patch, *write_manifests(root / "manifests"))
        assert names == ["MatrixFolders", "MatrixCsv"]
        with one_loader_worker():
            yield root / "data"


class Trainings:
    """train.py's run of each cell, trained when first asked for; a refusal is kept as the
    UserError it raised."""

    def __init__(self, data_dir: Path, root: Path) -> None:
        self.data_dir, self.root, self.done = data_dir, root, {}

    def folder(self, algorithm: str, kind: str, precision: str, averaging: str = "none") -> Path:
        return self.root / f"{algorithm}_{kind}_{precision}_{averaging}"

    def __call__(self, algorithm: str, kind: str, precision: str, averaging: str = "none") -> Path:
        key = (algorithm, kind, precision, averaging)
        if key not in self.done:
            output = self.folder(*key)
            args = [
                *("--algorithm", algorithm, "--dataset", KINDS[kind].dataset),
                *("--data_dir", str(self.data_dir), "--output_dir", str(output)),
                *("--test_envs", str(TEST_ENV), "--steps", str(steps(algorithm))),
                *("--holdout_fraction", str(HOLDOUT_FRACTION)),
                *("--hparams", json.dumps(run_hparams(*key))),
            ]
            try:
                domainbed_script("train", *args)
                self.done[key] = output
            except UserError as error:
                self.done[key] = error
        if isinstance(self.done[key], UserError):
            raise self.done[key]
        return self.done[key]


@pytest.fixture(scope="module")
def trained(data_dir, tmp_path_factory) -> Trainings:
    return Trainings(data_dir, tmp_path_factory.mktemp("runs"))


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]


# --- The cell ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "algorithm, kind, precision, averaging", CELLS, ids=["-".join(cell) for cell in CELLS]
)
def test_trains_evaluates_and_draws(trained, tmp_path, algorithm, kind, precision, averaging):
    """One cell: train.py, evaluate and masks on one algorithm, kind of dataset, precision and
    averaging, or the algorithm's refusal of the kind's inputs before anything is trained."""
    cell = (algorithm, kind, precision, averaging)
    if (algorithm, kind) in REFUSED:
        with pytest.raises(UserError, match=re.escape(REFUSED[(algorithm, kind)])) as refused:
            trained(*cell)
        assert "Datasets that fit:" in str(refused.value)
        assert not (trained.folder(*cell) / "results.jsonl").exists()
        return
    run = trained(*cell)
    hparams = run_hparams(*cell)

    # train.py ran every step, logged finite numbers and accuracies, saved its model
    assert (run / "done").is_file() and (run / "model.pkl").is_file()
    logged = records(run)
    assert [r["step"] for r in logged] == list(range(steps(algorithm)))
    environments = datasets.get_dataset_class(KINDS[kind].dataset).ENVIRONMENTS
    for record in logged:
        assert {k: record["hparams"][k] for k in hparams} == hparams
        assert precision_of(record) == precision
        numbers = {k: v for k, v in record.items() if isinstance(v, float)}
        assert all(map(math.isfinite, numbers.values())), numbers
        accuracies = [v for k, v in numbers.items() if k.endswith("_acc")]
        assert len(accuracies) == 2 * len(environments) and all(0 <= a <= 1 for a in accuracies)
        if kind.startswith("manifest"):  # the domains it was built with, checked by report
            assert record["hparams"]["manifest_domains"] == environments
    saved = torch.load(run / "model.pkl", weights_only=False)
    assert precision_of({"hparams": saved["model_hparams"]}) == precision

    # evaluate: every prediction the algorithm declares, on each source domain's held-out split
    code, printed, _ = cli("evaluate", "--run_dir", str(run), "--output_dir", str(tmp_path / "e"))
    assert code == 0
    assert f"In-domain accuracy (%) on {KINDS[kind].dataset}" in printed
    assert "WARNING" not in printed
    table = pd.read_csv(tmp_path / "e" / "in_domain.csv", dtype={"domain": str})
    known = declarations_of(algorithms.get_algorithm_class(algorithm)).KNOWN_DOMAIN_PREDICTIONS
    name = reported_names({run: logged[-1]})[run]  # a bf16 run's rows are its own: 'DMG (bf16)'
    predictions = [f"{name} (predict)", *(f"{name}-{k}" for k in known.values())]
    assert list(table["prediction"].unique()) == predictions
    sources = [name for env, name in enumerate(environments) if env != TEST_ENV]
    assert list(table["domain"].unique()) == sources
    assert table["accuracy"].between(0, 100).all() and (table["n_examples"] > 0).all()

    # masks: the pictures of the algorithms that declare them; a clear refusal for the others
    code, printed, message = cli(
        "masks", "--run_dir", str(run), "--output_dir", str(tmp_path / "m")
    )
    if declarations_of(algorithms.get_algorithm_class(algorithm)).LEARNED_PICTURES:
        assert code == 0, message
        assert (tmp_path / "m" / "masks.png").read_bytes().startswith(PNG_SIGNATURE)
        assert f"What {algorithm}" in printed
    else:
        assert code == 2
        assert f"is a run of {algorithm}, which draws nothing of what it learned" in message
        assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_selects_its_own_featurizer(trained, kind):
    """Between them, the kinds' inputs select every featurizer DomainBed builds."""
    model, _ = reload(trained("ERM", kind, "fp32"))
    assert type(model.featurizer).__name__ == KINDS[kind].network


# --- What the ResNet-18 runs show of the backbone ---------------------------------------------


@pytest.mark.parametrize("algorithm", ["Aggregate", "MultiHead", "DMG", "ImportanceMask"])
def test_a_saved_resnet18_model_reloads_and_classifies_held_out_images(trained, algorithm):
    """The algorithms whose networks depend on the backbone (masks on its layers, heads on its
    features), reloaded from model.pkl, classify 224x224 images of the held-out domain."""
    logits, x = held_out_logits(trained(algorithm, "domainbed_images", "fp32"), TEST_ENV)
    assert x.shape[1:] == (3, 224, 224)
    assert logits.shape == (2, CLASSES) and torch.isfinite(logits).all()


def test_dmg_masks_one_value_per_channel_of_the_real_resnet18(trained):
    model, checkpoint = reload(trained("DMG", "domainbed_images", "fp32"))
    assert isinstance(model.network.featurizer.network, torchvision.models.ResNet)
    # input channels of layer3 and layer4, classifier inputs
    assert_masks_on_resnet_channels(model, checkpoint["model_num_domains"], (128, 256, 512))


def test_evaluate_puts_runs_side_by_side_and_classifies_unaugmented(trained, tmp_path):
    runs = [trained(name, "domainbed_images", "fp32") for name in ("Aggregate", "MultiHead", "DMG")]
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
    assert set(table["domain"]) == {"C", "P", "S"}  # PACS's source domains, A held out

    code, _, _ = cli(
        "evaluate", "--run_dir", str(runs[-1]), "--output_dir", str(tmp_path / "again")
    )
    assert code == 0
    again = pd.read_csv(tmp_path / "again" / "in_domain.csv")
    dmg = table[table["algorithm"] == "DMG"].reset_index(drop=True)
    pd.testing.assert_frame_equal(again.drop(columns="run"), dmg.drop(columns="run"))
