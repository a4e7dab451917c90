"""The averaging benchmark runs end to end and prints its table; its timings are not judged."""

from pathlib import Path

from tests.helpers import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "averaging_cost.py"


def test_a_quick_run_prints_a_row_per_configuration(capsys, monkeypatch):
    bench = load_script(SCRIPT, monkeypatch)
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
