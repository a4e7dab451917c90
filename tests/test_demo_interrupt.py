"""Ctrl-C of the demo ends as Ctrl-C of a sweep does: its jobs stopped, its folder free, one
line saying what was stopped and how to resume, no traceback."""

import pytest

from tests.helpers import interrupt_once_jobs_run

pytestmark = pytest.mark.slow  # a demo of new processes, interrupted


def test_ctrl_c_stops_the_demo_s_jobs_and_says_how_to_resume(tmp_path):
    output = tmp_path / "demo"
    args = ["demo", "--output_dir", str(output), "--steps", "100000", "--trials", "1"]
    returncode, err = interrupt_once_jobs_run([*args, "--algorithms", "ERM"], output / "sweep")
    assert returncode == 130
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip().splitlines()[-1] == (
        f"Interrupted: the sweep's running jobs were stopped; 0 of 4 jobs are done and kept in "
        f"{output / 'sweep'}. Run the same command to resume."
    )
