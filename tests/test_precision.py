"""The ``precision`` hparam: bf16 autocast for every algorithm DomainBed builds, fp32 where it
matters, recorded in results and checkpoints; absent, every run is what it was without it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from domainbed import algorithms, datasets, hparams_registry
from torch import nn

from dmg_domainbed import precision
from dmg_domainbed.algorithms.dmg import masks
from dmg_domainbed.algorithms.importance_mask.grouped import GroupedLinear
from dmg_domainbed.algorithms.sfmoe.moe import SparseMoE
from dmg_domainbed.errors import UserError
from dmg_domainbed.preflight.hparams import checked_run
from dmg_domainbed.sweep.checks import check_file
from dmg_domainbed.sweep.config import load_sweep

from .helpers import domainbed_script, one_loader_worker

BF16 = {"precision": "bf16"}
NUM_CLASSES = 10
EMBEDDED = "RotatedDigits"
IMAGE_SHAPE = (3, 28, 28)  # Debug28's: DomainBed's MNIST_CNN featurizer
PLUGINS = ("Aggregate", "MultiHead", "DMG", "CorGrad", "ImportanceMask")
# ImportanceMask ends phase 1 after one step: the second step is phase 2.
ALGORITHM_HPARAMS = {
    "ImportanceMask": {"phase1_steps": 1, "freeze_step": 1, "unimportant_lr_half_life": 1},
}


def build(name: str, input_shape=None, dataset: str = EMBEDDED, **hparams) -> algorithms.Algorithm:
    """``name`` with DomainBed's default hparams for ``dataset``, updated with ``hparams``."""
    values = hparams_registry.default_hparams(name, dataset)
    values.update(ALGORITHM_HPARAMS.get(name, {}), **hparams)
    shape = input_shape or datasets.get_dataset_class(dataset).INPUT_SHAPE
    torch.manual_seed(0)
    return algorithms.get_algorithm_class(name)(shape, NUM_CLASSES, 3, values)


def minibatches(input_shape, batch: int | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    batch = batch or (2 if len(input_shape) == 3 else 4)  # bf16 convolutions are slow on CPUs
    generator = torch.Generator().manual_seed(1)
    return [
        (
            torch.randn(batch, *input_shape, generator=generator),
            torch.randint(0, NUM_CLASSES, (batch,), generator=generator),
        )
        for _ in range(3)
    ]


class OutputDtypes:
    """The dtypes of every linear and convolution output while it is attached."""

    def __init__(self, network: nn.Module) -> None:
        self.seen: set[torch.dtype] = set()
        kinds = nn.Linear | nn.Conv2d | GroupedLinear  # ImportanceMask's copies: grouped
        layers = [m for m in network.modules() if isinstance(m, kinds)]
        self.handles = [m.register_forward_hook(self.record) for m in layers]

    def record(self, module, args, output) -> None:
        self.seen.add(output.dtype)

    def take(self) -> set[torch.dtype]:
        seen, self.seen = self.seen, set()
        return seen


@pytest.mark.parametrize(
    "name, input_shape",
    [
        *((name, None) for name in ("ERM", *PLUGINS)),
        ("DMG", IMAGE_SHAPE),
    ],
    ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v or "embedded",
)
def test_bf16_trains_and_predicts_under_autocast_with_finite_losses(name, input_shape):
    shape = input_shape or datasets.get_dataset_class(EMBEDDED).INPUT_SHAPE
    algorithm = build(name, shape, **BF16)
    batches = minibatches(shape)
    dtypes = OutputDtypes(algorithm)
    for _ in range(2):
        logged = algorithm.update(batches)
        assert dtypes.take() == {torch.bfloat16}
        assert logged and all(math.isfinite(value) for value in logged.values()), logged
    algorithm.eval()
    with torch.no_grad():
        logits = algorithm.predict(batches[0][0])
    assert dtypes.take() == {torch.bfloat16}
    assert logits.dtype == torch.float32 and torch.isfinite(logits).all()
    assert logits.shape == (len(batches[0][0]), NUM_CLASSES)
    assert all(p.dtype == torch.float32 for p in algorithm.parameters())


@pytest.mark.parametrize("input_shape", [None, IMAGE_SHAPE], ids=["embedded", "image"])
def test_dmg_masked_activations_stay_bf16_and_images_go_channels_last(input_shape):
    shape = input_shape or datasets.get_dataset_class(EMBEDDED).INPUT_SHAPE
    dmg = build("DMG", shape, **BF16)
    seen: dict[str, set[torch.dtype]] = {}
    modules = dict(dmg.network.named_modules())
    inputs_channels_last = []
    first_conv = next((m for m in dmg.network.modules() if isinstance(m, nn.Conv2d)), None)
    if first_conv is not None:
        first_conv.register_forward_pre_hook(
            lambda module, args: inputs_channels_last.append(
                args[0].is_contiguous(memory_format=torch.channels_last)
            )
        )
    for name in dmg.masks.layer_names:
        # Registered after DMG's own pre-hook: sees the masked input.
        def record(module, args, name=name):
            seen.setdefault(name, set()).add(args[0].dtype)

        modules[name].register_forward_pre_hook(record)
    batches = minibatches(shape)
    dmg.update(batches)
    x = batches[0][0]
    with torch.no_grad():
        dmg.predict(x)
        for mode in masks.MODES:
            dmg.predict_known_domain(x, 0, mode)
    assert seen.keys() == set(dmg.masks.layer_names)
    assert all(dtypes == {torch.bfloat16} for dtypes in seen.values()), seen
    if input_shape is not None:
        assert inputs_channels_last == [True] * 4  # update, predict, two known-domain modes
        assert first_conv.weight.is_contiguous(memory_format=torch.channels_last)


def test_dmg_overlap_penalty_is_computed_in_fp32_under_autocast():
    probs = torch.rand(3, 4096, generator=torch.Generator().manual_seed(0))
    expected = masks.overlap_loss(probs)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        penalty = masks.overlap_loss(probs)
    assert penalty.dtype == torch.float32 and torch.equal(penalty, expected)


def test_sfmoe_routing_is_fp32_and_its_output_keeps_the_experts_dtype():
    torch.manual_seed(0)
    layer = SparseMoE(dim=16, hidden=32, experts=4).eval()
    x = torch.randn(2, 12, 16)
    expected = layer.route(x).probabilities
    with torch.autocast("cpu", dtype=torch.bfloat16):
        probabilities = layer.route(x).probabilities
        y = layer(x)
    assert probabilities.dtype == torch.float32 and torch.equal(probabilities, expected)
    assert y.dtype == torch.bfloat16 and torch.isfinite(y).all()
    assert layer.balance.dtype == torch.float32


@pytest.mark.parametrize("name", ["ERM", "DMG"])
def test_a_precision_that_does_not_exist_is_refused_with_the_choices(name):
    refused = rf"{name} hparam 'precision' = 'fp16' is not valid: it must be one of 'fp32', 'bf16'"
    with pytest.raises(UserError, match=refused):
        build(name, precision="fp16")


def test_bf16_for_an_algorithm_that_cannot_run_it_is_refused_before_the_first_step():
    """DomainBed's RSC takes a percentile of a bf16 gradient in NumPy: refused by name when it
    is built and by the preflight, instead of a TypeError at its first step."""
    refused = r"RSC hparam 'precision' = 'bf16' cannot run: .*NumPy.* Run RSC with 'fp32'"
    with pytest.raises(UserError, match=refused):
        build("RSC", **BF16)
    with pytest.raises(UserError, match=refused):
        checked_run("RSC", EMBEDDED, BF16)
    own_rsc = type("OwnRSC", (algorithms.RSC,), {})  # a plugin built on it inherits its step
    with pytest.raises(UserError, match="OwnRSC hparam 'precision' = 'bf16' cannot run"):
        precision.check(BF16, own_rsc)
    rsc = build("RSC")  # what the refusal spares: the same step under bf16 autocast
    with pytest.raises(TypeError), torch.autocast("cpu", dtype=torch.bfloat16):
        rsc.update(minibatches(datasets.get_dataset_class(EMBEDDED).INPUT_SHAPE))


def test_precision_is_a_known_hparam_of_every_algorithm_and_checked_before_a_sweep():
    assert "precision" not in hparams_registry.default_hparams("DMG", EMBEDDED)
    assert checked_run("DMG", EMBEDDED, BF16).hparams["precision"] == "bf16"
    assert checked_run("ERM", "PACS", BF16).hparams["precision"] == "bf16"
    with pytest.raises(UserError, match="it must be one of 'fp32', 'bf16'"):
        checked_run("DMG", EMBEDDED, {"precision": "half"})


def test_a_sweep_files_hparams_table_sets_the_precision_of_every_job(tmp_path):
    path = tmp_path / "bf16.toml"
    path.write_text(
        '[sweep]\nalgorithms = ["ERM", "DMG"]\ndatasets = ["RotatedDigits"]\n'
        '[sweep.hparams]\nprecision = "bf16"\n'
    )
    config = load_sweep(path)
    check_file(config)
    assert all(config.hparams_of(name) == BF16 for name in config.algorithms)
    path.write_text(path.read_text().replace('"bf16"', '"bfloat16"'))
    with pytest.raises(UserError, match="it must be one of 'fp32', 'bf16'"):
        check_file(load_sweep(path))


def test_fp32_leaves_the_algorithm_and_its_numbers_as_they_are(monkeypatch):
    """fp32 (absent or explicit) gives, bit for bit, what the same algorithm gives when it is
    built without the precision hook."""

    def trained(name, **hparams):
        algorithm = build(name, IMAGE_SHAPE, **hparams)
        batches = minibatches(IMAGE_SHAPE)
        torch.manual_seed(2)
        logged = [algorithm.update(batches) for _ in range(2)]
        with torch.no_grad():
            logits = algorithm.eval().predict(batches[0][0])
        return algorithm, logged, logits

    hooked = {name: [trained(name), trained(name, precision="fp32")] for name in ("ERM", "DMG")}
    monkeypatch.setattr(algorithms.Algorithm, "__init__", algorithms.Algorithm.__init__.__wrapped__)
    for name, runs in hooked.items():
        plain, logged, logits = trained(name)
        for algorithm, hooked_logged, hooked_logits in runs:
            assert hooked_logged == logged and torch.equal(hooked_logits, logits)
            assert vars(algorithm).keys() == vars(plain).keys()
            conv = next(m for m in algorithm.modules() if isinstance(m, nn.Conv2d))
            assert conv.weight.is_contiguous()  # DomainBed's own layout
            state, plain_state = algorithm.state_dict(), plain.state_dict()
            assert all(torch.equal(state[key], plain_state[key]) for key in plain_state)


# bf16 runs of train.py, with evaluate and masks on them, are cells of the combination matrix
# (tests/test_combinations.py).
RUNS = {
    # name: (algorithm, dataset, hparams, through the precision hook)
    "dmg_fp32": ("DMG", EMBEDDED, {}, True),
    "dmg_fp32_no_hook": ("DMG", EMBEDDED, {}, False),
    "erm_image_fp32": ("ERM", "Debug28", {"batch_size": 8}, True),
    "erm_image_fp32_no_hook": ("ERM", "Debug28", {"batch_size": 8}, False),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Every run of :data:`RUNS`: 3 steps of DomainBed's train.py in this process, checkpoints
    at steps 0 and 2, either through this package's precision hook or with DomainBed's own
    ``Algorithm.__init__``."""
    root = tmp_path_factory.mktemp("precision_runs")
    hooked = algorithms.Algorithm.__init__
    init = {True: hooked, False: hooked.__wrapped__}
    for name, (algorithm, dataset, hparams, with_hook) in RUNS.items():
        args = [
            *("--algorithm", algorithm, "--dataset", dataset, "--test_envs", "0"),
            *("--steps", "3", "--checkpoint_freq", "2", "--output_dir", str(root / name)),
        ]
        if hparams:
            args += ["--hparams", json.dumps(hparams)]
        with pytest.MonkeyPatch.context() as patch, one_loader_worker():
            patch.setattr(algorithms.Algorithm, "__init__", init[with_hook])
            domainbed_script("train", *args)
    return {name: root / name for name in RUNS}


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]


def checkpoint(run: Path) -> dict:
    return torch.load(run / "model.pkl", weights_only=False)


@pytest.mark.parametrize(
    "hooked, plain",
    [("dmg_fp32", "dmg_fp32_no_hook"), ("erm_image_fp32", "erm_image_fp32_no_hook")],
)
def test_without_the_setting_results_and_checkpoints_are_those_of_domainbed_alone(
    runs, hooked, plain
):
    def timeless(run: Path) -> list[dict]:
        kept = []
        for record in records(run):
            record.pop("step_time")
            record["args"].pop("output_dir")
            kept.append(record)
        return kept

    assert timeless(runs[hooked]) == timeless(runs[plain])
    assert all("precision" not in r["hparams"] for r in records(runs[hooked]))
    ours, theirs = checkpoint(runs[hooked]), checkpoint(runs[plain])
    assert ours["model_hparams"] == theirs["model_hparams"]
    assert ours["model_dict"].keys() == theirs["model_dict"].keys()
    assert all(
        torch.equal(ours["model_dict"][k], theirs["model_dict"][k]) for k in ours["model_dict"]
    )
