"""The averaging benchmark runs end to end and prints its table; its timings are not judged."""

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "averaging_cost.py"


def test_a_quick_run_prints_a_row_per_configuration(capsys, monkeypatch):
    spec = importlib.util.spec_from_file_location("averaging_cost", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "averaging_cost", bench)  # dataclasses look their module up
    spec.loader.exec_module(bench)
    rows = bench.main(["--quick"])
    printed = capsys.readouterr().out.splitlines()
    assert [row.config for row in rows] == ["mlp"]
    # DomainBed's MLP on 64 features: 64x128, 128x128 and 128x128 weights with their biases,
    # and a 128x7 classifier, every one averaged
    assert rows[0].values == 64 * 128 + 128 + 2 * (128 * 128 + 128) + 128 * 7 + 7
    assert rows[0].plain_ms > 0 and rows[0].averaged_ms > 0
    assert printed[1].split() == [
        "config",
        "plain",
        "ms",
        "sma",
        "ms",
        "+",
        "ms",
        "+",
        "%",
        "averaged",
    ]
    assert printed[2].split()[0] == "mlp" and printed[2].endswith("0.04M")
