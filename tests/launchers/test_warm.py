"""The warm runner: which commands it forks, and that a forked job starts as a new process
would (session, ties to the launcher, environment, threads, random state, streams, exit)."""

import json
import os
import signal
import sys

import pytest

from dmg_domainbed.launchers.warm import (
    TRAIN_MODULE,
    WarmStart,
    module_arguments,
    module_imports,
)

PROBE = "tests.launchers.probe_job"


def domainbed_train_command(**train_args) -> str:
    """The command DomainBed's own sweep writes for a job."""
    from domainbed.scripts.sweep import Job

    return Job(train_args, "/tmp/sweep output").command_str


def test_domainbed_train_commands_are_forked_with_their_arguments():
    command = domainbed_train_command(
        dataset="RotatedDigits",
        algorithm="DMG",
        test_envs=[0, 1],
        hparams='{"lambda_overlap": 0.5}',
        data_dir="/data dir",
    )
    program, arguments = module_arguments(command)
    assert program == "python"
    assert arguments[arguments.index("--hparams") + 1] == '{"lambda_overlap": 0.5}'
    assert arguments[arguments.index("--test_envs") + 1 : arguments.index("--test_envs") + 3] == [
        "0",
        "1",
    ]
    assert arguments[arguments.index("--data_dir") + 1] == "/data dir"


@pytest.mark.parametrize(
    "command",
    [
        "OMP_NUM_THREADS=4 python -m domainbed.scripts.train --steps 5",
        "python -m domainbed.scripts.train --steps 5 > log.txt",
        "cd /tmp && python -m domainbed.scripts.train --steps 5",
        "python -u -m domainbed.scripts.train --steps 5",
        'python -m domainbed.scripts.train --output_dir "$HOME/x"',
        "python -m domainbed.scripts.sweep launch",
        "python -m domainbed.scripts.train --steps 5; rm -rf x",
    ],
)
def test_anything_else_runs_as_a_new_process(command):
    assert module_arguments(command) is None


def test_the_parent_imports_what_train_imports():
    imports = module_imports(TRAIN_MODULE)
    assert {"torch", "torchvision", "domainbed.datasets", "domainbed.algorithms"} <= set(imports)
    assert "domainbed.lib.fast_data_loader" in imports


def fresh_thread_cap() -> int:
    """The most intra-op threads a new torch process takes (torch with MKL: physical cores)."""
    import torch

    from dmg_domainbed.launchers.warm import physical_cores

    return physical_cores() if torch.backends.mkl.is_available() else 10**6


def _run_probe(tmp_path, name, args, environ):
    log = tmp_path / f"{name}.log"
    process = WarmStart(PROBE).fork(args, environ, log)
    return process.wait(), log


@pytest.fixture
def job_environ(monkeypatch):
    env = dict(os.environ)
    env.update(
        CUDA_VISIBLE_DEVICES="7",
        OMP_NUM_THREADS="3",
        MKL_NUM_THREADS="3",
        DMG_DOMAINBED_LOADER_WORKERS="1",
        PROBE_MARK="job",
    )
    return env


@pytest.fixture
def sigterm_handler():
    """A Python SIGTERM handler in this process, as a program that calls a launcher may have."""
    previous = signal.signal(signal.SIGTERM, lambda number, frame: None)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_a_forked_job_starts_as_a_new_process(tmp_path, job_environ, sigterm_handler):
    import numpy
    import torch
    from domainbed import datasets

    reports = []
    for name in ("first", "second"):
        out = tmp_path / f"{name}.json"
        code, log = _run_probe(tmp_path, name, ["report", str(out)], job_environ)
        assert code == 0, log.read_text()
        reports.append(json.loads(out.read_text()))
        # Both streams go to the log (stdout block-buffered, as in a new process).
        assert sorted(log.read_text().splitlines()) == ["probe: to stderr", "probe: to stdout"]
    first, second = reports

    assert first["name"] == "__main__"
    assert first["argv"][0].endswith("probe_job.py")
    assert first["argv"][1:] == ["report", str(tmp_path / "first.json")]
    # Its own session and process group, tied to this process.
    assert first["ppid"] == os.getpid()
    assert first["pgid"] == first["sid"] == first["pid"] != os.getpid()
    assert first["parent_death_signal"] == signal.SIGTERM
    assert first["sigterm_default"]
    # Python's KeyboardInterrupt handler, unless SIGINT is ignored here (a background job of a
    # shell): a new process inherits that, and so does a forked one.
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert first["sigint_handler"] == (None if ignored else "default_int_handler")
    assert first["stdin"] == ""
    # The job's environment, read again where the parent's import already read it.
    assert first["environ"] == {
        "CUDA_VISIBLE_DEVICES": "7",
        "OMP_NUM_THREADS": "3",
        "DMG_DOMAINBED_LOADER_WORKERS": "1",
        "PROBE_MARK": "job",
    }
    assert torch.get_num_threads() == 1  # set by the test configuration
    assert first["torch_threads"] == min(3, fresh_thread_cap())
    assert first["pacs_loader_workers"] == 1 != datasets.PACS.N_WORKERS
    assert "PROBE_MARK" not in os.environ
    # Fresh random state: the children share none with each other or with this process.
    mine = {"random": __import__("random").random(), "numpy_random": numpy.random.rand()}
    for key in ("random", "numpy_random", "torch_seed"):
        assert first[key] != second[key]
    for key in ("random", "numpy_random"):
        assert mine[key] not in (first[key], second[key])
    assert torch.initial_seed() not in (first["torch_seed"], second["torch_seed"])


def test_a_new_process_and_a_forked_job_get_the_same_settings(tmp_path, job_environ):
    """Threads, seeding and data-loader workers: what a new process reads from its variables
    at import, a forked job gets from the warm runner."""
    from dmg_domainbed.launchers.warm import TORCH_FIXED_DEFAULT_SEED

    from ..helpers import run_python

    fresh = tmp_path / "fresh.json"
    run_python("-m", PROBE, "settings", str(fresh), env=job_environ)
    forked = tmp_path / "forked.json"
    _run_probe(tmp_path, "forked", ["settings", str(forked)], job_environ)
    fresh, forked = json.loads(fresh.read_text()), json.loads(forked.read_text())
    assert fresh["torch_threads"] == forked["torch_threads"]
    assert fresh["pacs_loader_workers"] == forked["pacs_loader_workers"] == 1
    fixed = TORCH_FIXED_DEFAULT_SEED
    assert (fresh["torch_seed"] == fixed) == (forked["torch_seed"] == fixed)


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
def test_a_forked_job_ends_as_a_new_process_would(tmp_path, job_environ, args, code, printed):
    status, log = _run_probe(tmp_path, "job", args, job_environ)
    assert status == code
    assert printed in log.read_text()


def test_the_module_runs_with_this_interpreter_only(tmp_path):
    warm = WarmStart(PROBE)
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    program = os.path.basename(sys.executable)
    assert warm.refusal(program, env) is None
    other = tmp_path / "bin"
    other.mkdir()
    (other / "python").write_text(
        "#!/bin/sh\necho /usr/local/bin/python-other\necho /opt/other-environment\n"
    )
    (other / "python").chmod(0o755)
    refusal = warm.refusal("python", dict(os.environ, PATH=str(other)))
    assert "not this process's interpreter" in refusal and sys.executable in refusal


POISONED_PARENT = f"""
import os, torch
from dmg_domainbed.launchers.warm import WarmStart

torch.set_num_threads(2)
torch.ones(1 << 20).mul_(2).sum()  # starts OpenMP's threads in this process
print(WarmStart("{PROBE}").refusal("python", os.environ))
"""


def test_a_parent_that_ran_openmp_threads_starts_jobs_as_new_processes():
    """A child forked after OpenMP's threads started would hang at its first parallel region."""
    from ..helpers import run_python

    printed = run_python("-c", POISONED_PARENT).stdout
    assert "has run multi-threaded torch operations" in printed
