"""Ctrl-C of the demo ends as Ctrl-C of a sweep does: its jobs stopped, its folder free, one
line saying what was stopped and how to resume, no traceback."""

import signal
import subprocess
import sys
import time

from tests.helpers import alive, descendants, domainbed_env


def test_ctrl_c_stops_the_demo_s_jobs_and_says_how_to_resume(tmp_path):
    output = tmp_path / "demo"
    sweep = output / "sweep"
    command = subprocess.Popen(
        [sys.executable, "-m", "dmg_domainbed", "demo", "--output_dir", str(output)]
        + ["--steps", "100000", "--trials", "1", "--algorithms", "ERM"],
        env=domainbed_env(DMG_LOCAL_PARALLEL_JOBS="2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C reaches a program in the foreground even where these tests run as a background
        # job of a shell, which ignores SIGINT.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and len(list(sweep.glob("*/out.txt"))) < 2:
            time.sleep(0.5)
        below = descendants(command.pid)
        assert len(list(sweep.glob("*/out.txt"))) == 2, "the jobs did not start"
        command.send_signal(signal.SIGINT)
        _, err = command.communicate(timeout=120)
    finally:
        command.kill()
        command.wait()
    assert command.returncode == 130
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip().splitlines()[-1] == (
        f"Interrupted: the sweep's running jobs were stopped; 0 of 4 jobs are done and kept in "
        f"{sweep}. Run the same command to resume."
    )
    deadline = time.monotonic() + 10  # the fork server of warm jobs ends a moment later
    while any(alive(pid) for pid in below) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert {pid for pid in below if alive(pid)} == set()
    assert [p.name for p in sweep.iterdir() if p.name.startswith(".")] == []  # lock freed
