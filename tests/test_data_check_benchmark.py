"""The data-check benchmark runs end to end and prints its rows; its timings are not judged."""

from pathlib import Path

from dmg_domainbed.datasets.layouts import IMAGE_LAYOUTS
from tests.helpers import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "data_check.py"


def test_a_small_copy_prints_the_quick_and_full_rows(capsys):
    bench = load_script(SCRIPT)
    bench.main(["--scale", "0.005", "--rounds", "1"])
    # check (22 characters), images, median s, images/s, verdict
    rows = {line[:22].strip(): line[22:].split() for line in capsys.readouterr().out.splitlines()}
    counts = IMAGE_LAYOUTS["PACS"].releases[0].per_domain.values()
    written = sum(max(7, round(n * 0.005)) for n in counts)  # at least one image per class
    assert rows["quick"][0] == rows["full, 1 worker(s)"][0] == str(written)
    # Half a percent of PACS's counts are no published release's, and none of its 4 domains
    # fills DomainBed's default batch of 32: the check says so, quick and full alike.
    assert rows["quick"][-2:] == rows["full, 1 worker(s)"][-2:] == ["5", "error(s)"]
