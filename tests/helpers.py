"""Helpers to run DomainBed's real scripts and this package's CLI in subprocesses."""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import psutil


def domainbed_env(**extra: str) -> dict[str, str]:
    """Environment for DomainBed subprocesses.

    DomainBed's sweep launches jobs as ``python -m domainbed.scripts.train`` with the ``python``
    found on PATH, so this interpreter's folder goes first. One thread per job keeps parallel
    jobs from oversubscribing the cores, and one data-loader worker per loader keeps a run from
    forking DomainBed's 8 per loader (dozens of processes a run).
    """
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("DMG_DOMAINBED_DISABLE", None)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    env.setdefault("DMG_DOMAINBED_LOADER_WORKERS", "1")
    env.update(extra)
    return env


def run_python(
    *args: str,
    cwd: Path | None = None,
    env: dict | None = None,
    check: bool = True,
    timeout: float = 600,
    new_interpreter: bool = False,
) -> subprocess.CompletedProcess:
    """Run ``python ARGS`` with this interpreter; on failure show what it printed.

    ``python -c CODE`` and ``python -m MODULE`` run in a child forked from an interpreter that
    started with the same start-up environment and has imported DomainBed's third-party
    libraries, and nothing of DomainBed or this package (:mod:`tests.preloaded_python`):
    everything from DomainBed's first import on happens as in a new interpreter, without some
    10 s of CPU each. ``new_interpreter=True`` starts a new one, for what happens before."""
    env = env or domainbed_env()
    if new_interpreter or args[0] not in ("-c", "-m"):
        result = subprocess.run(
            [sys.executable, *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    else:
        result = _run_preloaded(list(args), cwd, env, timeout)
    if check and result.returncode != 0:
        raise AssertionError(
            f"python {' '.join(args)} exited {result.returncode}\n"
            f"--- stdout ---\n{result.stdout[-4000:]}\n--- stderr ---\n{result.stderr[-4000:]}"
        )
    return result


# Environment variables a Python process, or a library it imports, reads at start-up or import:
# a preloaded interpreter serves only requests whose values of these are the ones it started with
# (an empty value counts as unset). PYTHONPATH only adds folders to sys.path: where they hold
# nothing already imported, the child forked for the request applies it (use_python_path); the
# child also installs the start-up hook as its .pth line would, under DMG_DOMAINBED_DISABLE.
START_UP_VARIABLES = (
    "PYTHON",
    "OMP_",
    "MKL_",
    "HF_",
    "HUGGINGFACE_",
    "XDG_",
    "TORCH",
    "CUDA_",
    "LD_",
)
_preloaded: dict[tuple, subprocess.Popen] = {}


def _preloaded_python(env: dict) -> subprocess.Popen:
    """The preloaded interpreter for ``env``'s start-up variables, started if it is not running."""
    applied_in_child = _python_path_applied_in_child(env.get("PYTHONPATH", ""))
    key = tuple(
        sorted(
            (name, value)
            for name, value in env.items()
            if name.startswith(START_UP_VARIABLES)
            and value
            and not (name == "PYTHONPATH" and applied_in_child)
        )
    )
    server = _preloaded.get(key)
    if server is None or server.poll() is not None:
        script = Path(__file__).with_name("preloaded_python.py")
        server = subprocess.Popen(
            [sys.executable, str(script)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            bufsize=0,
        )
        _preloaded[key] = server
    return server


def _python_path_applied_in_child(python_path: str) -> bool:
    """Whether the child forked for a request can apply ``PYTHONPATH=python_path`` itself: no
    folder of it holds a module that this process imported from elsewhere (a preloaded
    interpreter imports a part of what this process has; a module it imported before the
    request would not be replaced)."""
    for folder in filter(None, python_path.split(os.pathsep)):
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for entry in entries:
            module = sys.modules.get(entry.partition(".")[0])  # a package, .py or extension
            if module is None:
                continue
            location = getattr(module, "__file__", None) or ""
            if os.path.basename(location) == "__init__.py":
                location = os.path.dirname(location)
            here = os.path.join(folder, entry)
            if not (os.path.exists(location) and os.path.samefile(here, location)):
                return False
    return True


@atexit.register
def _stop_preloaded() -> None:
    """End the preloaded interpreters with this process (they end when their stdin closes)."""
    for server in _preloaded.values():
        server.stdin.close()
    for server in _preloaded.values():
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a child still running: end both
            server.kill()
            server.wait()


def _reply(server: subprocess.Popen, deadline: float) -> dict | None:
    """The preloaded interpreter's next JSON line, or None if none came before ``deadline``."""
    line = b""
    while not line.endswith(b"\n"):
        ready, _, _ = select.select([server.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return None
        chunk = os.read(server.stdout.fileno(), 1)
        if not chunk:
            raise AssertionError(f"the preloaded python ended with status {server.wait()}")
        line += chunk
    return json.loads(line)


def _run_preloaded(
    args: list[str], cwd: Path | None, env: dict, timeout: float
) -> subprocess.CompletedProcess:
    server = _preloaded_python(env)
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryDirectory() as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        request = {"args": args, "cwd": str(cwd or os.getcwd()), "env": env}
        request |= {"stdout": str(out), "stderr": str(err)}
        server.stdin.write(json.dumps(request).encode() + b"\n")
        pid = _reply(server, time.monotonic() + 600)["pid"]
        ended = _reply(server, deadline)
        if ended is None:
            os.kill(pid, signal.SIGKILL)
            _reply(server, time.monotonic() + 60)
            raise subprocess.TimeoutExpired([sys.executable, *args], timeout, out.read_text())
        return subprocess.CompletedProcess(
            [sys.executable, *args], ended["status"], out.read_text(), err.read_text()
        )


def run_domainbed(script: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    """Run one of DomainBed's own, unmodified scripts, e.g. ``run_domainbed('train', ...)``."""
    return run_python("-m", f"domainbed.scripts.{script}", *args, **kwargs)


DEMO_ALGORITHMS = ("ERM", "Aggregate", "MultiHead", "DMG", "CorGrad", "ImportanceMask")
DEMO_STEPS = "30"


def demo_args(output: Path) -> list[str]:
    """The tests' demo: every algorithm of this package and ERM, one trial, ``DEMO_STEPS``."""
    steps = ["--steps", DEMO_STEPS, "--trials", "1"]
    return ["demo", "--output_dir", str(output), *steps, "--algorithms", *DEMO_ALGORITHMS]


def run_cli(*args: str, check: bool = True, cwd: Path | None = None):
    """``python -m dmg_domainbed ARGS`` in a subprocess (two jobs at once, one thread each)."""
    env = domainbed_env(DMG_LOCAL_PARALLEL_JOBS="2")
    return run_python("-m", "dmg_domainbed", *args, check=check, cwd=cwd, env=env)


def cli(*args: str) -> tuple[int, str, str]:
    """``dmg-domainbed ARGS`` in this process: (exit code, stdout, stderr)."""
    from dmg_domainbed.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def cli_launching(*args: str) -> tuple[int, str, str]:
    """:func:`cli` in the environment :func:`run_cli` gives its subprocess (this interpreter
    first on PATH, two jobs at once, one thread each): for commands whose jobs and DomainBed
    scripts are new processes anyway, without the start-up of one more ``python``."""
    import pytest

    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("DMG_DOMAINBED_DISABLE", raising=False)
        for name, value in domainbed_env(DMG_LOCAL_PARALLEL_JOBS="2").items():
            if os.environ.get(name) != value:
                patch.setenv(name, value)
        return cli(*args)


def runs_of(sweep_dir: Path) -> dict[tuple[str, int], Path]:
    """Run folders of a sweep by (algorithm, first test env)."""
    runs = {}
    for results in sweep_dir.glob("*/results.jsonl"):
        args = json.loads(results.read_text().splitlines()[0])["args"]
        runs[(args["algorithm"], args["test_envs"][0])] = results.parent
    return runs


@contextlib.contextmanager
def read_only(folder: Path):
    """``folder`` (made if missing) unwritable for this process while the block runs: its mode
    0555, and immutable (``chattr +i``) where the process is root, whom modes do not stop."""
    import pytest

    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o555)
    immutable = os.access(folder, os.W_OK)
    if immutable:
        subprocess.run(["chattr", "+i", str(folder)], capture_output=True)
    try:
        if os.access(folder, os.W_OK):
            pytest.fail(f"could not make {folder} read-only (mode 0555, chattr +i)")
        yield folder
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], capture_output=True)
        folder.chmod(0o755)


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Size and modification time of every file under ``folder``."""
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting to be reaped does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def descendants(pid: int) -> set[int]:
    """Pids of the living processes below ``pid`` (children, their children, ...)."""
    try:
        below = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return set()
    return {process.pid for process in below if alive(process.pid)}


def interrupt_once_jobs_run(args: list[str], sweep_dir: Path, jobs: int = 2) -> tuple[int, str]:
    """Run ``dmg-domainbed ARGS``, press Ctrl-C once ``jobs`` of its jobs have started in
    ``sweep_dir``, and return its exit status and stderr, after checking that the processes it
    had started are gone and its folder lock is freed."""
    command = subprocess.Popen(
        [sys.executable, "-m", "dmg_domainbed", *args],
        env=domainbed_env(DMG_LOCAL_PARALLEL_JOBS=str(jobs)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C reaches a program in the foreground even where these tests run as a background
        # job of a shell, which ignores SIGINT.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and len(list(sweep_dir.glob("*/out.txt"))) < jobs:
            time.sleep(0.5)
        below = descendants(command.pid)
        assert len(list(sweep_dir.glob("*/out.txt"))) == jobs, "the jobs did not start"
        command.send_signal(signal.SIGINT)
        _, err = command.communicate(timeout=120)
    finally:
        command.kill()
        command.wait()
    deadline = time.monotonic() + 10  # the fork server of warm jobs ends a moment later
    while any(alive(pid) for pid in below) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert {pid for pid in below if alive(pid)} == set()
    assert [p.name for p in sweep_dir.iterdir() if p.name.startswith(".")] == []  # lock freed
    return command.returncode, err


def fresh_process_that_registers_erm_and_pacs():
    """What the doctor's probe of a new ``python`` finds where DomainBed and the plugins load."""
    from dmg_domainbed.preflight.environment import ProbeResult

    return ProbeResult(
        python="python",
        executable=sys.executable,
        domainbed="/opt/DomainBed/domainbed",
        algorithms=["ERM"],
        datasets=["PACS"],
        launchers=["local"],
    )


def machine_check(sweep, launcher: str = "local") -> str:
    """The sweep preflight's check of this machine for ``sweep`` run by ``launcher``: raises
    what would stop its jobs, else returns how the launcher will run them."""
    import dataclasses

    from dmg_domainbed.sweep.checks import check_sweep

    checked = check_sweep(dataclasses.replace(sweep, launcher=launcher), os.environ)
    if checked.problem is not None:
        raise checked.problem
    return checked.launcher


def domainbed_script(script: str, *args: str) -> str:
    """What ``python -m domainbed.scripts.SCRIPT ARGS`` prints, run unmodified in this process:
    for DomainBed's scripts whose work is not about a new interpreter (``collect_results``,
    ``list_top_hparams``, ``sweep`` with its launchers, ``train`` where the test is about the
    training, not its process), where one would check nothing more than the start-up that other
    tests check. An exception the script raises (a ``UserError`` of a plugin) propagates."""
    from importlib.util import find_spec
    from unittest import mock

    import numpy as np

    out = io.StringIO()
    with (
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(sys.stderr),  # put back after train.py replaces it
        mock.patch.object(sys, "argv", [script, *args]),
        np.printoptions(),  # the scripts set numpy's print options
    ):
        err = sys.stderr
        try:
            run_as_main(find_spec(f"domainbed.scripts.{script}").origin)
        finally:
            # collect_results tees what it prints into results.txt, train.py into out.txt and
            # err.txt
            for tee in {sys.stdout, sys.stderr} - {out, err}:
                tee.file.close()
    return out.getvalue()


def run_as_main(path: str) -> None:
    """Run the Python file ``path`` as ``python PATH`` runs it, in this process (by file: a
    module another test already imported would be run with a warning by ``runpy``).

    The script's globals are emptied when it ends, so that what it made is freed at once. Left
    to the garbage collector (a script's functions hold its globals in a cycle), the worker
    processes of DomainBed's data loaders would be stopped only after the collector had closed
    their queues, and each would be waited for 5 s, then killed."""
    main = types.ModuleType("__main__")
    main.__file__ = path
    saved = sys.modules["__main__"]
    sys.modules["__main__"] = main
    try:
        exec(compile(Path(path).read_bytes(), path, "exec"), vars(main))
    finally:
        sys.modules["__main__"] = saved
        vars(main).clear()


@contextlib.contextmanager
def one_loader_worker():
    """While the block runs, every DomainBed dataset class of this process gives each of its
    data loaders one worker process (the fewest the package allows, as a job with
    ``DMG_DOMAINBED_LOADER_WORKERS=1`` has): DomainBed's own 8 per loader would fork this
    process dozens of times a run. Then the classes' own numbers again."""
    from domainbed import datasets

    from dmg_domainbed import integration

    integration.cap_loader_workers(datasets, {integration.LOADER_WORKERS_VARIABLE: "1"})
    try:
        yield
    finally:
        integration.cap_loader_workers(datasets)


def register_manifests(monkeypatch, *files) -> list[str]:
    """Register the datasets of the manifest ``files`` into the real domainbed.datasets, as
    importing DomainBed does with ``DMG_DOMAINBED_DATASETS``; ``monkeypatch`` takes them out."""
    from domainbed import datasets

    from dmg_domainbed import integration
    from dmg_domainbed.datasets.manifest import MANIFESTS_VARIABLE, read_manifests

    environ = {MANIFESTS_VARIABLE: ":".join(str(f) for f in files)}
    names = [m.name for m in read_manifests(environ)[0]]
    monkeypatch.setattr(datasets, "DATASETS", list(datasets.DATASETS))
    for name in names:
        if not hasattr(datasets, name):  # taken out again when the monkeypatch is undone
            monkeypatch.setattr(datasets, name, None, raising=False)
            monkeypatch.delattr(datasets, name)
    return integration.register_manifest_datasets(datasets, environ)


def read_weights_from(monkeypatch, caches) -> None:
    """This process's torchvision, timm and SF-MoE weight loaders read ``caches``
    (a :class:`dmg_domainbed.weight_files.Caches`), offline, as a job with its environment
    does."""
    from huggingface_hub import constants

    monkeypatch.setenv("TORCH_HOME", caches.environment()["TORCH_HOME"])
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(caches.hf_hub))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def random_weight_cache(root: Path, backbones=(), deit: bool = False):
    """A :class:`dmg_domainbed.weight_files.Caches` under ``root`` holding random weights in
    the files the loaders read, offline: DomainBed's ResNet featurizer for each hparams of
    ``backbones`` and, with ``deit``, SFMOE's DeiT-S (only names and shapes matter to a test)."""
    from dmg_domainbed import deit_weights, synthetic
    from dmg_domainbed.preflight.weights import needed_weights
    from dmg_domainbed.weight_files import TORCH_HUB_FILE, Caches

    caches = Caches.under(root)
    for hparams in backbones:
        files, _ = needed_weights(hparams, synthetic.IMAGE_SHAPE, caches)
        synthetic.write_random_weights(files)
    if deit:
        locations = deit_weights.weight_locations("", caches)
        synthetic.write_random_weights([f for f in locations if f.layout == TORCH_HUB_FILE])
    return caches


def package_plugins(group: str) -> list[str]:
    """The names this package registers in the entry-point ``group`` (e.g.
    ``integration.ALGORITHM_GROUP``), sorted."""
    from dmg_domainbed import integration

    points = integration.entry_points(group).items()
    return sorted(name for name, point in points if point.value.startswith("dmg_domainbed."))
