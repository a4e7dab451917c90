"""The sweep runner: one command per folder at a time, and nothing left running when it dies."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import alive, cli, descendants, domainbed_env, snapshot

SWEEPS = Path(__file__).parents[2] / "sweeps"
HOLD = """
import sys, time
from dmg_domainbed.locks import FolderLock
with FolderLock(sys.argv[1], command="the other sweep"):
    print("held", flush=True)
    time.sleep(600)
"""


def small_sweep(tmp_path, steps: int) -> Path:
    text = (SWEEPS / "demo.toml").read_text()
    text = re.sub(r"(?m)^algorithms = .*$", 'algorithms = ["ERM"]', text)
    text = re.sub(r"(?m)^n_hparams = .*$", "n_hparams = 1", text)
    text = re.sub(r"(?m)^n_trials = .*$", f"n_trials = 1\nsteps = {steps}", text)
    text = re.sub(r"(?m)^output_dir = .*$", f'output_dir = "{tmp_path / "sweep"}"', text)
    path = tmp_path / "small.toml"
    path.write_text(text)
    return path


def test_a_second_command_on_a_locked_folder_stops_before_touching_anything(tmp_path, monkeypatch):
    sweep_file = small_sweep(tmp_path, steps=5)
    incomplete = tmp_path / "sweep" / "an_incomplete_job"
    incomplete.mkdir(parents=True)
    (incomplete / "out.txt").write_text("still training")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path / "sweep")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        before = snapshot(tmp_path / "sweep")
        for name, value in domainbed_env().items():
            monkeypatch.setenv(name, value)
        code, _, message = cli("sweep", str(sweep_file), "--delete-incomplete")
        assert code == 2
        assert "is in use by another run" in message and "the other sweep" in message
        assert str(holder.pid) in message
        assert snapshot(tmp_path / "sweep") == before
    finally:
        holder.kill()
        holder.wait()


def test_killing_the_command_ends_its_jobs_and_the_next_run_takes_over(tmp_path):
    sweep_file = small_sweep(tmp_path, steps=100_000)
    sweep_dir = tmp_path / "sweep"
    command = subprocess.Popen(
        [sys.executable, "-m", "dmg_domainbed", "sweep", str(sweep_file)],
        env=domainbed_env(DMG_LOCAL_PARALLEL_JOBS="2"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:  # the command is killed however this part ends: its jobs must not outlive the test
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not list(sweep_dir.glob("*/out.txt")):
            time.sleep(0.5)
        assert list(sweep_dir.glob("*/out.txt")), "no job started"
        below = descendants(command.pid)
        assert len(below) >= 2  # the launch process and its jobs
    finally:
        command.send_signal(signal.SIGKILL)
        command.wait()
    deadline = time.monotonic() + 60
    while any(alive(pid) for pid in below) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert {pid for pid in below if alive(pid)} == set()
    # the killed command's lock is stale: the next command on the folder takes it over
    rerun = subprocess.run(
        [
            sys.executable,
            "-m",
            "dmg_domainbed",
            "sweep",
            str(small_sweep(tmp_path, steps=5)),
            "--delete-incomplete",
        ],
        env=domainbed_env(DMG_LOCAL_PARALLEL_JOBS="2"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert len(list(sweep_dir.glob("*/done"))) == 4


def test_delete_incomplete_stops_at_a_job_that_slurm_still_runs(tmp_path, monkeypatch):
    from dmg_domainbed.sweep import config, plan

    sweep_file = small_sweep(tmp_path, steps=5)
    sweep = plan.resolve(config.load_sweep(sweep_file), None, None)
    jobs = [job for group in sweep.groups for job in plan.jobs(sweep, group)]
    running = Path(jobs[0].output_dir)
    running.mkdir(parents=True)
    (running / "out.txt").write_text("still training")
    # what the submitit launcher leaves in a job folder: a link to the job's Slurm log
    (running / "submitit.err").symlink_to("../.submitit/4242_0_0_log.err")
    # squeue stands in for a cluster here; tests/slurm reads a real one's answer
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text("#!/bin/sh\necho '4242_0|RUNNING'\n")
    (bin_dir / "squeue").chmod(0o755)
    for name, value in domainbed_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    before = snapshot(tmp_path / "sweep")

    code, _, message = cli("sweep", str(sweep_file), "--delete-incomplete")

    assert code == 2
    assert "1 incomplete job(s) are still queued or running on Slurm" in message
    assert f"{running} (RUNNING)" in message and "scancel" in message
    assert snapshot(tmp_path / "sweep") == before
    assert len(list((tmp_path / "sweep").iterdir())) == 1  # nothing launched
