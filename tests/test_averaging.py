"""The ``averaging`` hparam: every algorithm DomainBed builds evaluates and saves the moving
average of its weights (SMA or EMA) through DomainBed's own train.py, trains exactly the weights
it trains without it, and with ``"none"`` (or nothing) leaves every record as it was."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from domainbed import algorithms, datasets, hparams_registry
from torch import nn

from dmg_domainbed import averaging, integration, synthetic
from dmg_domainbed.errors import UserError
from dmg_domainbed.preflight.hparams import checked_run
from dmg_domainbed.sweep.checks import check_file
from dmg_domainbed.sweep.config import load_sweep

from .helpers import domainbed_script, one_loader_worker, package_plugins, reload

NUM_CLASSES = 10
EMBEDDED = "RotatedDigits"
IMAGE_SHAPE = (3, 28, 28)  # Debug28's: DomainBed's MNIST_CNN featurizer


def build(name: str, input_shape=None, dataset: str = EMBEDDED, **hparams) -> nn.Module:
    values = hparams_registry.default_hparams(name, dataset) | hparams
    shape = input_shape or datasets.get_dataset_class(dataset).INPUT_SHAPE
    torch.manual_seed(0)
    return algorithms.get_algorithm_class(name)(shape, NUM_CLASSES, 3, values)


def minibatches(input_shape, batch: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        (
            torch.randn(batch, *input_shape, generator=generator),
            torch.randint(0, NUM_CLASSES, (batch,), generator=generator),
        )
        for _ in range(3)
    ]


def trained_state(algorithm: nn.Module) -> dict[str, torch.Tensor]:
    """The algorithm's state as its class gives it: the weights it trains, never the average."""
    return {k: v.detach().clone() for k, v in type(algorithm).state_dict(algorithm).items()}


def sma(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {k: torch.stack([s[k].double() for s in states]).mean(0) for k in states[0]}


def ema(states: list[dict[str, torch.Tensor]], decay: float) -> dict[str, torch.Tensor]:
    average = {k: v.double() for k, v in states[0].items()}
    for state in states[1:]:
        average = {k: decay * average[k] + (1 - decay) * state[k].double() for k in average}
    return average


def assert_state_is(state: dict, expected: dict, last: dict) -> None:
    """``state`` holds ``expected`` (the average) in its floating-point entries, which differ
    from the ``last`` trained weights, and the last trained value in every other entry."""
    assert state.keys() == last.keys()
    for key, value in state.items():
        if value.is_floating_point():
            torch.testing.assert_close(value.double(), expected[key], rtol=1e-5, atol=1e-7)
        else:
            assert torch.equal(value, last[key]), key
    assert any(not torch.equal(state[k], last[k]) for k in expected if last[k].is_floating_point())


@pytest.mark.parametrize("mode", ["sma", "ema"])
@pytest.mark.parametrize("name", ["ERM", "DMG"])
def test_the_average_is_evaluated_and_saved_while_the_trained_weights_train_on(name, mode):
    """The trained weights, losses and train-mode predictions are those of the same algorithm
    without averaging, step for step; in eval mode it predicts with the average, and its
    ``state_dict`` is the average in either mode."""
    start, decay, steps = 1, 0.5, 4
    hparams = {"averaging": mode, "averaging_start": start}
    if mode == "ema":
        hparams["averaging_decay"] = decay
    averaged, plain = build(name, **hparams), build(name)
    batches = minibatches(datasets.get_dataset_class(EMBEDDED).INPUT_SHAPE)
    x = batches[0][0]
    seen = []
    for step in range(steps):
        logged = []
        for algorithm in (averaged, plain):
            torch.manual_seed(step)
            logged.append(algorithm.update(batches))
        assert logged[0] == logged[1]
        seen.append(trained_state(averaged))
        assert all(torch.equal(v, seen[-1][k]) for k, v in trained_state(plain).items())
        with torch.no_grad():
            averaged.eval()
            evaluated = averaged.predict(x)
            averaged.train()
            assert torch.equal(averaged.predict(x), plain.predict(x))
    expected = sma(seen[start:]) if mode == "sma" else ema(seen[start:], decay)
    assert_state_is(averaged.state_dict(), expected, seen[-1])
    assert all(torch.equal(v, seen[-1][k]) for k, v in trained_state(averaged).items())
    # The same network with the average loaded predicts what the averaged one evaluated.
    reloaded = build(name)
    reloaded.load_state_dict(averaged.state_dict())
    with torch.no_grad():
        assert torch.equal(reloaded.eval().predict(x), evaluated)


def test_before_its_start_step_the_trained_weights_stand_for_the_average():
    algorithm = build("ERM", averaging="sma", averaging_start=3)
    batches = minibatches(datasets.get_dataset_class(EMBEDDED).INPUT_SHAPE)
    for _ in range(3):
        algorithm.update(batches)
        state = algorithm.eval().state_dict()
        assert all(torch.equal(v, trained_state(algorithm)[k]) for k, v in state.items())
        algorithm.train()
    algorithm.update(batches)
    assert averaging.average_of(algorithm).count == 1


def test_bf16_and_averaging_combine_on_images():
    """bf16 trains (channels_last, autocast) and the average is of its fp32 weights; the
    averaged model predicts in fp32 and is what a fresh bf16 model loaded with it predicts."""
    hparams = {"precision": "bf16", "averaging": "ema", "averaging_start": 0}
    algorithm = build("DMG", IMAGE_SHAPE, "Debug28", **hparams)
    batches = minibatches(IMAGE_SHAPE, batch=2)
    seen = []
    for _ in range(3):
        algorithm.update(batches)
        seen.append(trained_state(algorithm))
    state = algorithm.state_dict()
    assert_state_is(state, ema(seen, 0.999), seen[-1])
    conv = next(m for m in algorithm.modules() if isinstance(m, nn.Conv2d))
    with torch.no_grad():
        algorithm.eval()
        assert conv.weight.is_contiguous(memory_format=torch.channels_last)
        logits = algorithm.predict(batches[0][0])
        reloaded = build("DMG", IMAGE_SHAPE, "Debug28", precision="bf16")
        reloaded.load_state_dict(state)
        assert torch.equal(reloaded.eval().predict(batches[0][0]), logits)
    assert logits.dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in algorithm.parameters())


@pytest.mark.parametrize(
    "hparams, refused",
    [
        ({"averaging": "swa"}, "'averaging' = 'swa' is not valid: it must be one of 'none', 'sma'"),
        ({"averaging": "ema", "averaging_decay": 1.0}, "it must be below 1"),
        ({"averaging": "ema", "averaging_decay": -0.1}, "it must be a number between 0 and 1"),
        ({"averaging": "sma", "averaging_start": -1}, "it must be an integer >= 0"),
        ({"averaging": "sma", "averaging_start": 1.5}, "it must be an integer >= 0, not float"),
        (
            {"averaging": "sma", "averaging_decay": 0.99},
            "'averaging_decay' = 0.99 is read only with 'averaging' 'ema', and this run's "
            "'averaging' is 'sma'",
        ),
        ({"averaging_start": 10}, "this run's 'averaging' is 'none': it would change nothing"),
        ({"averaging_strat": 10}, "averaging_strat"),
    ],
)
def test_a_bad_averaging_is_refused_when_built_and_before_a_sweep(hparams, refused):
    with pytest.raises(UserError, match=refused.replace("(", r"\(")):
        build("ERM", **hparams)
    with pytest.raises(UserError, match=refused.replace("(", r"\(")):
        checked_run("DMG", EMBEDDED, hparams)


@pytest.mark.parametrize(
    "hparams, steps, refused",
    [
        ('averaging = "sma"', 50, "'averaging_start' = 100 (its default) is not below the last"),
        ('averaging = "ema"\naveraging_start = 49', 50, "is not below the last of the run's 50"),
        ('averaging = "sma"\naveraging_start = 48', 50, None),
        ('averaging = "sma"', None, None),  # RotatedDigits' own 600 steps
        ("averaging_start = 10", 50, "this run's 'averaging' is 'none'"),
    ],
)
def test_a_sweep_that_would_average_nothing_is_refused_before_it_starts(
    tmp_path, hparams, steps, refused
):
    path = tmp_path / "averaged.toml"
    length = f"steps = {steps}\n" if steps else ""
    path.write_text(
        f'[sweep]\nalgorithms = ["ERM", "DMG"]\ndatasets = ["{EMBEDDED}"]\n{length}'
        f"[sweep.hparams]\n{hparams}\n"
    )
    if refused is None:
        check_file(load_sweep(path))
        return
    with pytest.raises(UserError, match=re.escape(refused)) as error:
        check_file(load_sweep(path))
    assert str(error.value).startswith(f"{path}: ")  # the file, then where in it


# --- Through DomainBed's train.py ---------------------------------------------------------------

STEPS, START = 4, 1  # train.py evaluates and checkpoints at steps 0 and 3 (the last)
ALGORITHMS = ("ERM", *package_plugins(integration.ALGORITHM_GROUP))
# ImportanceMask's phase 1 is steps 0 and 1; step 1 ends it (its copies go), so the average
# starts again from step 2's phase-2 network.
AVERAGED_STEPS = {"ImportanceMask": (2, 3)}
RUN_HPARAMS = {
    "ImportanceMask": {"phase1_steps": 2, "freeze_step": 3, "unimportant_lr_half_life": 1},
    "SFMOE": {"sfmoe_pretrained": False, "batch_size": 1},  # random DeiT-S weights, offline
}
# SFMOE takes images only, and evaluates each at 224x224 with its DeiT-S: the fewest there can be,
# DomainBed's PACS layout with 2 classes and 2 images per domain.
IMAGES = {"dataset": "PACS", "classes": 2, "holdout_fraction": 0.5}
DATASET = {"SFMOE": IMAGES["dataset"]}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("averaging_data")
    per_domain = synthetic.images_needed(1, IMAGES["holdout_fraction"], IMAGES["classes"])
    synthetic.write_image_dataset(IMAGES["dataset"], root, per_domain, IMAGES["classes"])
    return root


@pytest.mark.parametrize("name", ALGORITHMS)
def test_train_py_evaluates_and_saves_the_simple_moving_average(
    name, data_dir, tmp_path, monkeypatch
):
    """DomainBed's unmodified train.py, with ``averaging`` ``sma``: ``model.pkl``'s weights are
    the mean of the trained weights of the averaged steps, and the last evaluation predicted
    with them (the reloaded model predicts the same logits on the same inputs)."""
    args = ["--dataset", DATASET.get(name, EMBEDDED)]
    if name in DATASET:
        args += ["--data_dir", str(data_dir), "--holdout_fraction", str(IMAGES["holdout_fraction"])]
    assert_train_py_saves_the_average(
        name, RUN_HPARAMS.get(name, {}), args, AVERAGED_STEPS.get(name), tmp_path, monkeypatch
    )


def assert_train_py_saves_the_average(
    name, hparams, args, averaged_steps, output_dir, monkeypatch
) -> None:
    """Train ``name`` with ``averaging`` ``sma`` from step :data:`START` through train.py (with
    ``args``; ``averaged_steps``: the steps it averages, by default :data:`START` on), then
    assert that ``model.pkl`` holds the mean of the trained weights of those steps and that the
    last evaluation predicted with it. DomainBed's modules are imported here, so that a caller
    may run it on a DomainBed imported afresh."""
    from domainbed import algorithms

    cls = algorithms.get_algorithm_class(name)
    update, predict = cls.update, cls.predict
    seen, evaluated = [], []

    def recording_update(self, *args, **kwargs):
        result = update(self, *args, **kwargs)
        seen.append(trained_state(self))
        return result

    def recording_predict(self, x):
        logits = predict(self, x)
        if not self.training:
            evaluated.append((len(seen), x.clone(), logits.clone()))
        return logits

    hparams = {"averaging": "sma", "averaging_start": START, **hparams}
    args = [
        *("--algorithm", name, "--test_envs", "0", *args),
        *("--steps", str(STEPS), "--checkpoint_freq", str(STEPS)),
        *("--output_dir", str(output_dir), "--hparams", json.dumps(hparams)),
    ]
    with monkeypatch.context() as patch, one_loader_worker():
        patch.setattr(cls, "update", recording_update)
        patch.setattr(cls, "predict", recording_predict)
        domainbed_script("train", *args)
    expected = sma([seen[step] for step in averaged_steps or range(START, STEPS)])
    model, checkpoint = reload(output_dir)
    assert checkpoint["model_hparams"]["averaging"] == "sma"
    assert_state_is(checkpoint["model_dict"], expected, seen[-1])
    last = [(x, logits) for after, x, logits in evaluated if after == STEPS]
    assert last  # train.py evaluated after the last step
    with torch.no_grad():
        for x, logits in last:
            assert torch.equal(model.predict(x), logits)
    records = (output_dir / "results.jsonl").read_text().splitlines()
    logged = [json.loads(line) for line in records]
    assert [r["step"] for r in logged] == [0, STEPS - 1]
    assert all(r["hparams"]["averaging"] == "sma" for r in logged)


# --- "none" is no averaging at all ----------------------------------------------------------------


@pytest.fixture(scope="module")
def unaveraged_runs(tmp_path_factory) -> dict[str, Path]:
    """DMG through train.py, 3 steps, checkpoints at steps 0 and 2: with ``"averaging":
    "none"``, with no averaging hparam, and with DomainBed's own ``Algorithm.__init__`` (no
    hook of this package at all)."""
    root = tmp_path_factory.mktemp("unaveraged")
    hooked = algorithms.Algorithm.__init__
    runs = {"none": ({"averaging": "none"}, hooked), "absent": ({}, hooked)}
    runs["no_hook"] = ({}, hooked.__wrapped__)
    for name, (hparams, init) in runs.items():
        args = [
            *("--algorithm", "DMG", "--dataset", EMBEDDED, "--test_envs", "0", "--steps", "3"),
            *("--checkpoint_freq", "2", "--output_dir", str(root / name)),
        ]
        if hparams:
            args += ["--hparams", json.dumps(hparams)]
        with pytest.MonkeyPatch.context() as patch, one_loader_worker():
            patch.setattr(algorithms.Algorithm, "__init__", init)
            domainbed_script("train", *args)
    return {name: root / name for name in runs}


def without_averaging(record: dict) -> dict:
    """A record as it would be without the averaging hparam: its hparams and the run's
    arguments without it (``--hparams`` as given, and the output folder, name the run)."""
    hparams = {k: v for k, v in record["hparams"].items() if k != "averaging"}
    args = {k: v for k, v in record["args"].items() if k not in ("hparams", "output_dir")}
    return record | {"hparams": hparams, "args": args}


@pytest.mark.parametrize("run", ["none", "absent"])
def test_no_averaging_leaves_records_and_model_bit_identical(unaveraged_runs, run):
    """Bit-identical: every results.jsonl record equal, number for number, to the run without
    this package's hook, but for ``step_time`` (wall clock), the output folder, ``--hparams``
    and the hparam ``"averaging": "none"`` itself; ``model.pkl`` the same arguments, hparams
    (but that one) and every tensor of ``model_dict`` equal in dtype and value."""

    def records(name: str) -> list[dict]:
        lines = (unaveraged_runs[name] / "results.jsonl").read_text().splitlines()
        return [without_averaging(json.loads(line)) | {"step_time": 0} for line in lines]

    assert records(run) == records("no_hook")
    ours, theirs = (
        torch.load(unaveraged_runs[n] / "model.pkl", weights_only=False) for n in (run, "no_hook")
    )
    plain = {k: v for k, v in ours["model_hparams"].items() if k != "averaging"}
    assert plain == theirs["model_hparams"]
    assert ours["model_dict"].keys() == theirs["model_dict"].keys()
    for key, tensor in ours["model_dict"].items():
        assert tensor.dtype == theirs["model_dict"][key].dtype
        assert torch.equal(tensor, theirs["model_dict"][key]), key
