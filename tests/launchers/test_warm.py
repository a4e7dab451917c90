"""Warm start: which commands start warm, and that a warm job starts and ends as a new process
would (session, tie to the launcher, environment, threads, data-loader workers, streams, exit
status)."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from dmg_domainbed.launchers import local_parallel as lp

PROBE = "tests.launchers.probe_job"


def test_domainbed_train_commands_start_warm_with_their_arguments():
    """With the words the shell passes to train.py when the command runs as a new process,
    a flag without a value (which the sweep file's ``save_model_every_checkpoint = true`` adds
    as an empty list, written as two spaces) included."""
    from domainbed.scripts.sweep import Job

    command = Job(
        {
            "dataset": "RotatedDigits",
            "algorithm": "DMG",
            "test_envs": [0, 1],
            "hparams": '{"lambda_overlap": 0.5}',
            "data_dir": "/data dir's",
            "save_model_every_checkpoint": [],
            "seed": 3,
        },
        "/tmp/sweep output",
    ).command_str
    arguments = lp.module_arguments(command)
    printed = command.replace("python -m domainbed.scripts.train", "printf '%s\\0'", 1)
    from_shell = subprocess.run(["sh", "-c", printed], capture_output=True, text=True, check=True)
    assert arguments == from_shell.stdout.split("\0")[:-1]
    assert arguments[arguments.index("--hparams") + 1] == '{"lambda_overlap": 0.5}'
    start = arguments.index("--test_envs") + 1
    assert arguments[start : start + 2] == ["0", "1"]
    assert arguments[arguments.index("--data_dir") + 1] == "/data dir's"
    flag = arguments.index("--save_model_every_checkpoint")
    assert arguments[flag + 1 : flag + 3] == ["--seed", "3"]


@pytest.mark.parametrize(
    "command",
    [
        "OMP_NUM_THREADS=4 python -m domainbed.scripts.train --steps 5",
        "python -m domainbed.scripts.train --steps 5 > log.txt",
        "cd /tmp && python -m domainbed.scripts.train --steps 5",
        "python -u -m domainbed.scripts.train --steps 5",
        'python -m domainbed.scripts.train --output_dir "$HOME/x"',
        "python -m domainbed.scripts.sweep launch",
        "python3 -m domainbed.scripts.train --steps 5",
        "python -m domainbed.scripts.train --steps 5; rm -rf x",
        "python -m domainbed.scripts.train --data_dir ~/data",
        "python -m domainbed.scripts.train --data_dir data/*",
        "python -m domainbed.scripts.train --steps 5\nrm -rf x",
        "python -m domainbed.scripts.train --data_dir 'a'\\''b'",
    ],
)
def test_anything_else_runs_as_a_new_process(command):
    assert lp.module_arguments(command) is None


def test_only_this_interpreter_runs_warm(tmp_path):
    assert lp.warm_refusal({**os.environ, "PATH": os.path.dirname(sys.executable)}) is None
    other = tmp_path / "bin"
    other.mkdir()
    (other / "python").symlink_to(sys.executable)  # as a virtual environment's python is
    refusal = lp.warm_refusal({**os.environ, "PATH": str(other)})
    assert "is not this process's interpreter" in refusal and sys.executable in refusal
    assert "`python` on PATH (none)" in lp.warm_refusal({**os.environ, "PATH": str(tmp_path)})


@pytest.fixture
def job_environ():
    return dict(
        os.environ,
        CUDA_VISIBLE_DEVICES="7",
        OMP_NUM_THREADS="3",
        MKL_NUM_THREADS="3",
        DMG_DOMAINBED_LOADER_WORKERS="1",
        PROBE_MARK="job",
    )


def run_warm(tmp_path, args, environ) -> tuple[int, str]:
    log = tmp_path / "job.log"
    job = lp.start_warm(PROBE, args, environ, log)
    job.join()
    return job.exitcode, log.read_text()


def test_a_warm_job_starts_as_a_new_process(tmp_path, job_environ):
    from domainbed import datasets

    out = tmp_path / "report.json"
    code, log = run_warm(tmp_path, ["report", str(out)], job_environ)
    assert code == 0, log
    # Both streams go to the log.
    assert sorted(log.splitlines()) == ["probe: to stderr", "probe: to stdout"]
    seen = json.loads(out.read_text())
    assert seen["name"] == "__main__"
    assert seen["argv"][0].endswith("probe_job.py") and seen["argv"][1:] == ["report", str(out)]
    # Its own session and process group, below the fork server (this process's child).
    assert seen["pgid"] == seen["sid"] == seen["pid"]
    assert seen["ppid"] in {child.pid for child in psutil.Process().children()}
    # SIGINT as a new interpreter has it: Python's handler, unless this process ignores it
    # (as a worker of pytest-xdist does), which a new process would inherit.
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert seen["sigterm_default"]
    assert seen["sigint_handler"] == (None if ignored else "default_int_handler")
    assert seen["stdin"] == ""
    # The job's environment, read again where the fork server's import already read it.
    assert seen["environ"] == {
        "CUDA_VISIBLE_DEVICES": "7",
        "OMP_NUM_THREADS": "3",
        "DMG_DOMAINBED_LOADER_WORKERS": "1",
        "PROBE_MARK": "job",
    }
    assert seen["pacs_loader_workers"] == 1 != datasets.PACS.N_WORKERS
    assert "PROBE_MARK" not in os.environ


def test_a_new_process_and_a_warm_job_get_the_same_settings(tmp_path, job_environ):
    """Threads and data-loader workers: what a new process reads from its variables at import,
    a warm job gets too (torch with MKL caps threads at the physical cores in both); and
    multiprocessing's default start method, by which DomainBed's loaders start their workers
    (a fork of the job on Linux before Python 3.14, not a second fork server whose workers
    import the job's modules again: tens of seconds before step 0 on image datasets)."""
    from ..helpers import run_python

    fresh = tmp_path / "fresh.json"
    run_python("-m", PROBE, "settings", str(fresh), env=job_environ)
    forked = tmp_path / "forked.json"
    assert run_warm(tmp_path, ["settings", str(forked)], job_environ)[0] == 0
    fresh, forked = json.loads(fresh.read_text()), json.loads(forked.read_text())
    assert fresh == forked and fresh["pacs_loader_workers"] == 1


@pytest.mark.parametrize(
    "args, code, printed",
    [
        (["exit", "3"], 3, ""),
        (["message", "bad input given"], 1, "bad input given"),
        (["raise", "boom"], 1, "RuntimeError: boom"),
        (["abort"], -signal.SIGABRT, ""),
        (["kill"], -signal.SIGKILL, ""),
        (["oom"], 1, "torch.OutOfMemoryError: CUDA out of memory"),
    ],
)
def test_a_warm_job_ends_as_a_new_process_would(tmp_path, job_environ, args, code, printed):
    status, log = run_warm(tmp_path, args, job_environ)
    assert status == code
    assert printed in log


def test_no_job_is_forked_while_a_thread_that_the_imports_started_runs(tmp_path):
    """In a process of its own: a process has one fork server, started with its first warm
    job, and this one must preload the module whose import starts the thread."""
    from ..helpers import domainbed_env, run_python

    start_one = (
        "import os; from dmg_domainbed.launchers import local_parallel as lp; "
        "job = lp.start_warm('tests.launchers.thread_at_import', [], os.environ, None); "
        "job.join(); raise SystemExit(job.exitcode)"
    )
    env = domainbed_env(THREAD_MARKER=str(tmp_path / "thread_ended"))
    run_python("-c", start_one, env=env, cwd=Path(__file__).parents[2])
