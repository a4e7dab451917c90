"""``benchmarks/step_time.py --precision bf16`` times every algorithm in bf16 next to itself in
fp32 and prints the speed-up per algorithm; its figures are not judged here."""

from __future__ import annotations

import csv

from .test_step_time_benchmark import load_script


def test_step_time_prints_the_bf16_speed_up_of_every_algorithm(tmp_path, capsys, monkeypatch):
    step_time = load_script(monkeypatch)
    monkeypatch.setattr(step_time, "MIN_SAMPLE_S", 0.0)
    table = tmp_path / "table.csv"
    args = ["--quick", "--configs", "mlp", "--algorithms", "DMG", "--csv", str(table)]
    step_time.main([*args, "--precision", "bf16"])
    printed = capsys.readouterr().out

    assert [row["algorithm"] for row in csv.DictReader(table.open())] == ["ERM", "DMG"]
    speedups = list(csv.DictReader((tmp_path / "table_bf16.csv").open()))
    assert [row["algorithm"] for row in speedups] == ["ERM", "DMG"]
    for row in speedups:
        for column in ("step_speedup", "predict_speedup", "memory_ratio", "bf16_images_per_s"):
            assert float(row[column]) > 0, (column, row)
    assert "bf16 against fp32" in printed and "step x" in printed

    (tmp_path / "table_bf16.csv").unlink()
    step_time.main(args)
    printed = capsys.readouterr().out
    assert "against fp32" not in printed and not (tmp_path / "table_bf16.csv").exists()
