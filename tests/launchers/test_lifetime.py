"""Jobs end with the launcher that started them: Ctrl-C stops them, and so does a kill -9 of
the launcher's process (DomainBed's sweep included), for warm and for new-process jobs."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..helpers import alive, descendants, domainbed_env, erm_sweep_args

pytestmark = pytest.mark.slow  # launchers and jobs of their own, killed

ROOT = Path(__file__).parents[2]
JOB = "tests.launchers.sleep_job"
# A launcher process: every command at once; the job module's commands start warm.
LAUNCHER = f"""
import sys
from dmg_domainbed.launchers.local_parallel import Plan, run_commands

commands = sys.argv[1:]
plan = Plan(jobs=len(commands), gpus=(), threads=1, loader_workers=1, warm=True)
run_commands(commands, plan, warm_module="{JOB}")
"""


def wait_until(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {seconds:g} s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def leftovers():
    """Pids to kill after the test, should it fail with them still running."""
    pids: set[int] = set()
    yield pids
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def start_launcher(tmp_path, leftovers):
    """A launcher running one warm and one new-process job, both started; (process, job pids)."""
    python = os.path.basename(sys.executable)
    warm_marker, fresh_marker = tmp_path / "warm_started", tmp_path / "fresh_started"
    commands = [
        f"{python} -m {JOB} 600 {warm_marker}",
        f"{python} -u -m {JOB} 600 {fresh_marker}",  # not the bare module: a new process
    ]
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, *commands],
        cwd=ROOT,
        env=domainbed_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # Ctrl-C reaches a program in the foreground even where these tests run as a background
        # job of a shell, which ignores SIGINT.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    leftovers.add(launcher.pid)
    wait_until(lambda: job_pids(warm_marker, fresh_marker), 120, "both jobs to start")
    jobs = job_pids(warm_marker, fresh_marker)
    leftovers.update(descendants(launcher.pid))
    assert jobs <= descendants(launcher.pid)
    return launcher, jobs


def job_pids(*markers: Path) -> set[int]:
    """The pids the jobs wrote into their markers, once all have."""
    texts = [marker.read_text() if marker.exists() else "" for marker in markers]
    return {int(text) for text in texts} if all(texts) else set()


def test_kill_9_of_the_launcher_ends_its_jobs(tmp_path, leftovers):
    launcher, jobs = start_launcher(tmp_path, leftovers)
    launcher.kill()
    launcher.wait()
    wait_until(lambda: not any(alive(pid) for pid in jobs), 15, f"jobs {jobs} to end")


def test_ctrl_c_stops_every_job(tmp_path, leftovers):
    launcher, jobs = start_launcher(tmp_path, leftovers)
    launcher.send_signal(signal.SIGINT)
    output, _ = launcher.communicate(timeout=60)
    assert launcher.returncode != 0 and "KeyboardInterrupt" in output
    assert not any(alive(pid) for pid in jobs)


def test_kill_9_of_domainbed_sweep_ends_its_jobs(tmp_path, leftovers):
    """DomainBed's own sweep script running local_parallel, killed while two jobs train."""
    sweep_dir = tmp_path / "sweep"
    sweep = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "domainbed.scripts.sweep",
            "launch",
            *erm_sweep_args(tmp_path / "data", sweep_dir, "--steps", "1000000"),
            *("--command_launcher", "local_parallel"),
        ],
        env=domainbed_env(DMG_LOCAL_PARALLEL_JOBS="2"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: len(list(sweep_dir.glob("*/out.txt"))) == 2, 300, "two jobs to start training"
        )
        jobs = descendants(sweep.pid)  # the fork server and its two jobs
        leftovers.update(jobs)
        assert len(jobs) >= 3
    finally:
        sweep.kill()
        sweep.wait()
    wait_until(lambda: not any(alive(pid) for pid in jobs), 15, f"jobs {jobs} to end")
    assert len(list(sweep_dir.glob("*/done"))) == 0
