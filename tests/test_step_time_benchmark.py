"""The benchmark script runs end to end and writes its table; its figures are not judged here."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import torch

from tests import helpers

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "step_time.py"


def load_script(monkeypatch):
    return helpers.load_script(SCRIPT, monkeypatch)


def test_quick_run_writes_a_row_per_algorithm_with_ratios_to_erm(tmp_path, capsys, monkeypatch):
    step_time = load_script(monkeypatch)
    monkeypatch.setattr(step_time, "MIN_SAMPLE_S", 0.0)
    table = tmp_path / "table.csv"
    configs = ["--configs", "mlp", "resnet50"]
    algorithms = ["--algorithms", "DMG", "CorGrad", "ImportanceMask"]
    step_time.main(["--quick", *configs, *algorithms, "--csv", str(table)])
    printed = capsys.readouterr().out

    rows = list(csv.DictReader(table.open()))
    phases = ["ImportanceMask", "ImportanceMask phase 2"]
    assert [row["algorithm"] for row in rows] == ["ERM", "DMG", "CorGrad", *phases]
    erm, dmg, corgrad, *importance_mask = rows
    # ImportanceMask timed in both phases: its copies, then one network with per-weight rates
    assert all(float(row["step_ms"]) > 0 for row in importance_mask)
    assert float(erm["step_ratio"]) == float(erm["memory_ratio"]) == 1.0
    assert float(dmg["step_ms"]) > 0 and float(dmg["peak_mb"]) > float(erm["peak_mb"]) * 0.5
    assert float(dmg["predict_vs_floor"]) > 0
    # the unavoidable floor of DMG's step keeps the masked activations: more memory than ERM
    assert float(dmg["step_floor_ratio"]) > 0 and float(dmg["memory_floor_ratio"]) > 1.0
    assert erm["step_floor_ratio"] == "" and erm["memory_floor_ratio"] == ""
    assert "DMG step / ERM" in printed and "floor" in printed
    # CorGrad's floor: its per-domain backward passes without its rule
    assert float(corgrad["step_floor_ratio"]) > 0 and float(corgrad["memory_floor_ratio"]) > 0
    assert "CorGrad step / ERM" in printed and "CorGrad step / its floor" in printed
    if not torch.cuda.is_available():
        assert "resnet50: skipped, no CUDA device" in printed


COUNTS_SCRIPT = SCRIPT.with_name("step_counts.py")


def load_counts(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPT.parent))  # step_counts imports step_time beside it
    return helpers.load_script(COUNTS_SCRIPT, monkeypatch)


def test_counts_print_every_step_and_floor_with_one_host_read_each(capsys, monkeypatch):
    step_counts = load_counts(monkeypatch)
    tiny = next(c for c in step_counts.configurations() if c.name == "tiny")
    # three channels, as images have: bf16's change of the input's layout is counted too
    tiny = dataclasses.replace(tiny, input_shape=(3, *tiny.input_shape[1:]))
    names = ["ERM", "CorGrad", "ImportanceMask"]
    steps = ["ERM", "CorGrad", "ImportanceMask phase 1", "ImportanceMask phase 2"]
    counts = {}
    for precision, floors in [("fp32", ["CorGrad floor"]), ("bf16", [])]:
        counts[precision] = step_counts.count(names, tiny, precision)
        assert list(counts[precision]) == steps + floors
        for label, counted in counts[precision].items():
            assert counted.ops >= counted.launches > 0, (precision, label)
            # every step reads its logged floats back once; Adam's step counts stay on the host
            assert counted.syncs == 1, (precision, label)
    for label, bf16 in counts["bf16"].items():
        # bf16 launches fp32's kernels and autocast's casts, nothing else (the input's layout,
        # the global pool's re-strided output)
        assert bf16.casts > 0 and step_counts.beyond_casts(bf16, counts["fp32"][label]) == 0
    step_counts.main(["--configs", "tiny", "--algorithms", "CorGrad", "--precision", "fp32"])
    printed = capsys.readouterr().out
    assert "aten ops launches casts + not casts syncs slow foreach" in printed
    assert "CorGrad floor" in printed


def test_counts_tell_autocasts_casts_from_the_launches_bf16_adds(monkeypatch):
    """bf16's goal on the host: no launch beyond autocast's casts. A Linear under autocast casts
    its input, weight and bias (3 casts) before one addmm; a step's column '+ not casts' is its
    launches less casts over fp32's."""
    step_counts = load_counts(monkeypatch)
    linear, x = torch.nn.Linear(4, 4), torch.randn(2, 4)
    with step_counts.StepRecorder() as fp32:
        linear(x)
    with step_counts.StepRecorder() as bf16, torch.autocast("cpu", dtype=torch.bfloat16):
        linear(x)
    fp32, bf16 = fp32.counts(), bf16.counts()
    assert (fp32.casts, bf16.casts) == (0, 3)
    assert step_counts.beyond_casts(bf16, fp32) == 0  # the casts are all bf16 adds here
    with step_counts.StepRecorder() as back:
        x.double()  # a float change of dtype is a cast; an integer one is not
        x.long()
    assert back.counts().casts == 1


def test_counts_tell_foreach_calls_whose_tensors_differ_in_strides(monkeypatch):
    """Gradients in another memory format than their weights: a GPU runs Adam's foreach
    kernels tensor by tensor."""
    step_counts = load_counts(monkeypatch)
    weight = torch.nn.Parameter(torch.randn(8, 4, 3, 3).to(memory_format=torch.channels_last))
    bias = torch.nn.Parameter(torch.randn(8))
    optimizer = torch.optim.Adam([weight, bias], foreach=True)

    def launches(weight_grad):
        weight.grad, bias.grad = weight_grad, torch.ones(8)
        with step_counts.StepRecorder() as recorder:
            optimizer.step()
        return recorder.counts()

    launches(torch.ones_like(weight))  # Adam's state made
    same = launches(torch.ones_like(weight))
    other = launches(torch.ones(8, 4, 3, 3))
    assert same.slow_foreach == 0
    assert other.slow_foreach > 0 and other.launches > same.launches
