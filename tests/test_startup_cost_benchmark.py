"""The start-up benchmark runs end to end and prints its table; its timings are not judged."""

from pathlib import Path

from tests.helpers import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "startup_cost.py"


def test_one_round_prints_every_configuration(capsys, monkeypatch):
    bench = load_script(SCRIPT, monkeypatch)
    bench.main(["--rounds", "1"])
    printed = capsys.readouterr().out

    # configuration, CPU ms, + plain, wall ms, modules, hook import us
    rows = {
        row[0]: row[1:] for row in (line.rsplit(None, 5) for line in printed.splitlines()) if row
    }
    names = [bench.PLAIN, bench.ANY_HOOK, bench.EMPTY_HOOK, bench.WITH_PACKAGE, bench.DISABLED]
    assert set(names) <= set(rows)
    modules = {name: int(rows[name][3]) for name in names}
    # the hook's own package and module, nothing else, switched on or off
    assert modules[bench.WITH_PACKAGE] == modules[bench.DISABLED] == modules[bench.PLAIN] + 2
    assert float(rows[bench.WITH_PACKAGE][4]) > 0 == float(rows[bench.PLAIN][4])
    assert "the package adds " in printed and "ms CPU to python -c pass" in printed
