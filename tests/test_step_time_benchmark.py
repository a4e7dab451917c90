"""The benchmark script runs end to end and writes its table; its figures are not judged here."""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "step_time.py"


def load_script(monkeypatch):
    spec = importlib.util.spec_from_file_location("step_time", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "step_time", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_quick_run_writes_a_row_per_algorithm_with_ratios_to_erm(tmp_path, capsys, monkeypatch):
    step_time = load_script(monkeypatch)
    monkeypatch.setattr(step_time, "MIN_SAMPLE_S", 0.0)
    table = tmp_path / "table.csv"
    configs = ["--configs", "mlp", "resnet50"]
    step_time.main(["--quick", *configs, "--algorithms", "DMG", "CorGrad", "--csv", str(table)])
    printed = capsys.readouterr().out

    rows = list(csv.DictReader(table.open()))
    assert [row["algorithm"] for row in rows] == ["ERM", "DMG", "CorGrad"]
    erm, dmg, corgrad = rows
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
