"""The sweep runner: one command per folder at a time, progress from DomainBed's ``done`` files,
and nothing left running when it dies."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from dmg_domainbed.launchers.common import output_dir_of
from dmg_domainbed.sweep.launch import watch_done
from tests.helpers import (
    alive,
    cli,
    cli_launching,
    descendants,
    domainbed_env,
    interrupt_once_jobs_run,
    snapshot,
)

SWEEPS = Path(__file__).parents[2] / "sweeps"
HOLD = """
import sys, time
from dmg_domainbed.locks import FolderLock
with FolderLock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(600)
"""


def small_sweep(tmp_path, steps: int) -> Path:
    text = (SWEEPS / "demo.toml").read_text()
    text = re.sub(r"(?m)^algorithms = .*$", 'algorithms = ["ERM"]', text)
    text = re.sub(r"(?ms)^\[sweep\.algorithm_hparams\.DMG\]\n.*?\n\n", "", text)  # no DMG
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
        assert "is in use by another run" in message and f"(pid {holder.pid} on " in message
        assert snapshot(tmp_path / "sweep") == before
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
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
    code, out, err = cli_launching(
        "sweep", str(small_sweep(tmp_path, steps=5)), "--delete-incomplete"
    )
    assert code == 0, out + err
    assert len(list(sweep_dir.glob("*/done"))) == 4


@pytest.mark.slow
def test_ctrl_c_stops_the_jobs_frees_the_folder_and_says_how_to_resume(tmp_path):
    sweep_file = small_sweep(tmp_path, 100_000)
    returncode, err = interrupt_once_jobs_run(["sweep", str(sweep_file)], tmp_path / "sweep")
    assert returncode == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (
        f"Interrupted: the sweep's running jobs were stopped; 0 of 4 jobs are done and kept in "
        f"{tmp_path / 'sweep'}. Run the same command with --delete-incomplete to resume."
    )


def recording_launcher(running=None):
    """A launcher of this test's own (DomainBed stays real): it writes down the commands it is
    given and the environment, and says that the folders in ``running`` still have a running job."""
    from dmg_domainbed.launchers.common import Launcher

    calls = {"commands": [], "asked": [], "environ": []}

    class Recording(Launcher):
        def launch(self, commands, environ):
            print(f"launching {len(commands)}")
            calls["commands"] += commands
            calls["environ"].append(dict(environ))
            calls["process environ"] = dict(os.environ)

        def running_jobs(self, output_dirs, environ):
            calls["asked"].append(sorted(output_dirs))
            return {folder: "RUNNING" for folder in output_dirs if folder in (running or ())}

    return Recording(), calls


def incomplete_and_done(tmp_path):
    """The small sweep's 4 jobs: the first two incomplete (a folder, no done file), the others
    done; (sweep, incomplete folders)."""
    from dmg_domainbed.sweep import config, plan

    sweep = config.resolve(config.load_sweep(small_sweep(tmp_path, steps=5)), None, None)
    jobs = [job for group in plan.groups(sweep.config) for job in plan.jobs(sweep, group)]
    for n, job in enumerate(jobs):
        Path(job.output_dir).mkdir(parents=True)
        (Path(job.output_dir) / ("out.txt" if n < 2 else "done")).write_text("")
    return sweep, [Path(job.output_dir) for job in jobs[:2]]


def locked_execute(sweep, *args, **kwargs) -> int:
    """:func:`~dmg_domainbed.sweep.launch.execute` as the runner calls it: the plan made with
    the output folder locked."""
    from dmg_domainbed.locks import FolderLock
    from dmg_domainbed.sweep import launch, plan

    with FolderLock(sweep.output_dir):
        return launch.execute(plan.plan_sweep(sweep), *args, **kwargs)


def test_incomplete_jobs_are_deleted_and_launched_again_only_when_asked(tmp_path, monkeypatch):
    from domainbed import command_launchers

    sweep, incomplete = incomplete_and_done(tmp_path)
    launcher, calls = recording_launcher()
    monkeypatch.setitem(command_launchers.REGISTRY, "recording", launcher)
    lines = []

    assert locked_execute(sweep, "recording", {}, False, echo=lines.append) == 0
    assert calls == {"commands": [], "asked": [], "environ": []}  # nothing else to launch
    assert all((folder / "out.txt").exists() for folder in incomplete)

    log = tmp_path / "sweep.log"
    assert locked_execute(sweep, "recording", {"X": "1"}, True, echo=lines.append, log=log) == 0
    assert calls["asked"] == [sorted(incomplete)]
    assert sorted(output_dir_of(c) for c in calls["commands"]) == sorted(map(str, incomplete))
    assert all(not (folder / "out.txt").exists() for folder in incomplete)  # deleted, relaunched
    assert "launching 2" in log.read_text() and lines == []  # the launch's output into the log
    # the sweep's environment is passed to the launcher; this process's is left as it was
    assert calls["environ"] == [{"X": "1"}] and calls["process environ"] == dict(os.environ)


def test_delete_incomplete_stops_at_a_job_the_launcher_still_runs(tmp_path, monkeypatch):
    from domainbed import command_launchers

    sweep, incomplete = incomplete_and_done(tmp_path)
    launcher, calls = recording_launcher(running=incomplete[:1])
    monkeypatch.setitem(command_launchers.REGISTRY, "recording", launcher)
    for name, value in domainbed_env().items():
        monkeypatch.setenv(name, value)
    before = snapshot(tmp_path / "sweep")

    code, _, message = cli(
        "sweep", str(sweep.config.path), "--launcher", "recording", "--delete-incomplete"
    )

    assert code == 2
    assert "1 incomplete job(s) are still queued or running" in message
    assert f"{incomplete[0]} (RUNNING)" in message and "nothing was deleted or launched" in message
    assert snapshot(tmp_path / "sweep") == before and calls["commands"] == []


def test_delete_incomplete_refuses_a_job_folder_that_is_a_symbolic_link(tmp_path, monkeypatch):
    """DomainBed's delete (``shutil.rmtree``) cannot remove a link: one message naming it, exit
    2, and nothing deleted, neither the other incomplete folder nor what the link points to."""
    from domainbed import command_launchers

    sweep, incomplete = incomplete_and_done(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    incomplete[1].rename(elsewhere)
    incomplete[1].symlink_to(elsewhere)
    launcher, calls = recording_launcher()
    monkeypatch.setitem(command_launchers.REGISTRY, "recording", launcher)
    for name, value in domainbed_env().items():
        monkeypatch.setenv(name, value)
    before = snapshot(tmp_path)

    code, _, message = cli(
        "sweep", str(sweep.config.path), "--launcher", "recording", "--delete-incomplete"
    )

    assert code == 2 and "Traceback" not in message
    assert f"{incomplete[1]} is a symbolic link (to {elsewhere})" in message
    assert "nothing was deleted or launched" in message
    assert snapshot(tmp_path) == before and calls["commands"] == []
    assert incomplete[1].is_symlink() and (elsewhere / "out.txt").exists()


def fake_job(tmp_path, algorithm, test_env):
    """What the watcher reads of a DomainBed ``Job``: its folder and its train.py arguments."""
    folder = tmp_path / f"{algorithm}_{test_env}"
    folder.mkdir()
    args = dict(algorithm=algorithm, dataset="RotatedDigits", test_envs=[test_env], trial_seed=1)
    return SimpleNamespace(output_dir=str(folder), train_args=dict(args, hparams_seed=0))


def test_reports_each_job_once_when_its_done_file_appears(tmp_path):
    finished_before = fake_job(tmp_path, "ERM", 0)
    (tmp_path / "ERM_0" / "done").write_text("done")
    first, second = fake_job(tmp_path, "DMG", 1), fake_job(tmp_path, "DMG", 2)
    lines = []
    jobs = [finished_before, first, second]
    with watch_done(jobs, lines.append, interval=0.01):
        (tmp_path / "DMG_2" / "done").write_text("done")
        deadline = time.monotonic() + 10
        while not lines and time.monotonic() < deadline:
            time.sleep(0.01)
        (tmp_path / "DMG_1" / "done").write_text("done")
    assert [line.split(" (")[0] for line in lines] == [
        "[2/3] done: DMG, test domain 60 of RotatedDigits, hparams 0, trial 1",
        "[3/3] done: DMG, test domain 30 of RotatedDigits, hparams 0, trial 1",
    ]


def test_fifteen_thousand_mask_layers_are_refused_before_any_job_folder(tmp_path):
    """A layer list of 15,000 names (three names, repeated) with jobs started as new processes:
    refused when the sweep is checked, in a message of readable length, before any folder."""
    names = ", ".join(['"featurizer.input"', '"classifier"', '"featurizer.hiddens.0"'] * 5000)
    sweep_file = tmp_path / "layers.toml"
    sweep_file.write_text(
        '[sweep]\nalgorithms = ["DMG"]\ndatasets = ["RotatedDigits"]\nn_hparams = 1\n'
        f'n_trials = 1\nsingle_test_envs = true\nsteps = 5\ndata_dir = "."\n'
        f'output_dir = "{tmp_path / "sweep"}"\n'
        f"[sweep.algorithm_hparams.DMG]\nmask_layers = [{names}]\n"
        '[launcher]\nname = "local_parallel"\nwarm = false\n'
    )
    code, _, message = cli("sweep", str(sweep_file))
    assert code == 2
    repeated = "'featurizer.input', 'classifier', 'featurizer.hiddens.0' more than once"
    assert f"it names {repeated}: give each layer once" in message
    assert "(15,000 items)" in message and len(message) < 2000
    assert not (tmp_path / "sweep").exists()


def test_a_job_command_too_long_to_start_stops_the_sweep_before_any_job_folder(tmp_path):
    """A fixed hparam long enough that the command passes what ``execve`` takes (here one no
    check of values refuses, as a plugin's list hparam could be): the runner refuses it before
    it deletes or launches anything, naming the hparam."""
    from dmg_domainbed.errors import UserError
    from dmg_domainbed.sweep import config

    size = 32 * os.sysconf("SC_PAGE_SIZE") + 1  # past Linux's bound on one argument
    sweep_file = small_sweep(tmp_path, steps=5)
    sweep_file.write_text(
        sweep_file.read_text() + f'\n[sweep.algorithm_hparams.ERM]\nnotes = "{"x" * size}"\n'
    )
    sweep = config.resolve(config.load_sweep(sweep_file), None, None, "local")
    with pytest.raises(UserError) as refused:
        locked_execute(sweep, "local", domainbed_env(), delete_incomplete=True, echo=print)
    message = str(refused.value)
    assert "the jobs' command lines are too long to start: the longest, of ERM on " in message
    assert f"most of all notes ({size + 2:,} bytes)" in message
    assert "this machine refuses it (Argument list too long; " in message
    assert "Nothing was created." in message and len(message) < 2000
    assert [p.name for p in (tmp_path / "sweep").iterdir() if p.is_dir()] == []
