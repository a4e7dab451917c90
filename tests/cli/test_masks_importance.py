"""``dmg-domainbed masks`` on ImportanceMask runs made by DomainBed's train script."""

import pandas as pd
import pytest

from tests.helpers import cli, domainbed_script, runs_of, snapshot


@pytest.fixture(scope="module")
def phase1_run(tmp_path_factory):
    """A run that ended in phase 1: 3 steps with the default schedule (phase 1 is 2,500)."""
    run_dir = tmp_path_factory.mktemp("importance") / "phase1"
    args = ["--algorithm", "ImportanceMask", "--dataset", "RotatedDigits", "--steps", "3"]
    domainbed_script("train", *args, "--output_dir", str(run_dir))
    return run_dir


def test_importance_maps_and_masks_are_drawn(demo_sweep, tmp_path):
    # the demo scales the schedule to its steps: its ImportanceMask runs reached phase 2
    run_dir = runs_of(demo_sweep)[("ImportanceMask", 0)]
    before = snapshot(run_dir)
    code, printed, _ = cli("masks", "--run_dir", str(run_dir), "--output_dir", str(tmp_path))
    assert code == 0, printed
    assert "classifier.weight" in printed and "classifier.bias" in printed
    assert (tmp_path / "masks.png").stat().st_size > 10_000
    table = pd.read_csv(tmp_path / "masks_importance.csv")
    assert set(table["parameter"]) == {"classifier.weight", "classifier.bias"}
    assert table["importance"].between(0, 1).all() and table["importance"].max() == 1
    # the default keeps the top 60% of the tracked weights as important
    assert table["important"].mean() == pytest.approx(0.6, abs=0.01)
    assert snapshot(run_dir) == before


def test_a_run_that_ended_in_phase_one_gets_a_clear_message(phase1_run, tmp_path):
    code, _, message = cli(
        "masks", "--run_dir", str(phase1_run), "--output_dir", str(tmp_path / "out")
    )
    assert code == 2
    assert "ended in phase 1" in message and "phase1_steps 2500" in message
    assert not (tmp_path / "out").exists()
