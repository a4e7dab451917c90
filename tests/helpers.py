"""Helpers to run DomainBed's real scripts and this package's CLI: in the test process, and in a
new process for the tests whose subject is the process."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import psutil


def load_script(path: Path, monkeypatch=None) -> types.ModuleType:
    """A script of ``benchmarks/`` or ``docs/`` as a module named after its file; with
    ``monkeypatch``, in ``sys.modules`` for the test (dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    if monkeypatch is not None:
        monkeypatch.setitem(sys.modules, path.stem, module)
    spec.loader.exec_module(module)
    return module


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
) -> subprocess.CompletedProcess:
    """Run ``python ARGS`` in a new process of this interpreter; on failure show what it printed.

    For the tests whose subject is a process of its own (start-up, the exit status and error
    stream of a script, a launcher's processes); everything else runs in the test process."""
    result = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env or domainbed_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"python {' '.join(args)} exited {result.returncode}\n"
            f"--- stdout ---\n{result.stdout[-4000:]}\n--- stderr ---\n{result.stderr[-4000:]}"
        )
    return result


def run_domainbed(script: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    """Run one of DomainBed's own, unmodified scripts in a new process, e.g.
    ``run_domainbed('train', ...)``."""
    return run_python("-m", f"domainbed.scripts.{script}", *args, **kwargs)


DEMO_ALGORITHMS = ("ERM", "Aggregate", "MultiHead", "DMG", "CorGrad", "ImportanceMask")
DEMO_STEPS = "30"


def demo_args(output: Path) -> list[str]:
    """The tests' demo: every algorithm of this package and ERM, one trial, ``DEMO_STEPS``."""
    steps = ["--steps", DEMO_STEPS, "--trials", "1"]
    return ["demo", "--output_dir", str(output), *steps, "--algorithms", *DEMO_ALGORITHMS]


def cli(*args: str) -> tuple[int, str, str]:
    """``dmg-domainbed ARGS`` in this process: (exit code, stdout, stderr)."""
    from dmg_domainbed.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def cli_launching(*args: str) -> tuple[int, str, str]:
    """:func:`cli` in the environment a sweep's jobs get in these tests (this interpreter first
    on PATH, two jobs at once, one thread each): for commands whose jobs are new processes."""
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
    """What ``python -m domainbed.scripts.SCRIPT ARGS`` prints on stdout, the script run
    unmodified in this process (:func:`run_as_main`). An exception that ends it (a plugin's
    ``UserError``) propagates; what it writes to stderr before it replaces the stream goes to
    this process's (pytest's ``capsys``). ``train`` runs here wherever the test is about the
    run, not its process (:func:`one_loader_worker` for datasets with loader workers)."""
    import numpy as np

    out = io.StringIO()
    with (
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(sys.stderr),  # put back after train.py replaces it
        np.printoptions(),  # the scripts set numpy's print options
    ):
        err = sys.stderr
        try:
            run_as_main(f"domainbed.scripts.{script}", *args)
        finally:
            # collect_results tees what it prints into results.txt, train.py into out.txt and
            # err.txt
            for tee in {sys.stdout, sys.stderr} - {out, err}:
                tee.file.close()
    return out.getvalue()


def run_as_main(module: str, *args: str) -> None:
    """Run ``python -m MODULE ARGS`` in this process: the module's code as ``__main__`` with its
    spec, and ``sys.argv`` as ``-m`` sets it, both put back afterwards. The module is run from
    its file, not imported (``runpy`` would warn where another test had imported it).

    What the script made is dropped when it ends, so that it is freed at once: left to the
    garbage collector (a script's functions hold its globals in a cycle), the worker processes
    of DomainBed's data loaders would be stopped only after the collector closed their queues,
    each waited for 5 s, then killed. Its dunder names stay, for a traceback through it."""
    from importlib.util import find_spec

    spec = find_spec(module)
    main = types.ModuleType("__main__")
    main.__spec__, main.__file__, main.__loader__ = spec, spec.origin, spec.loader
    saved = sys.modules["__main__"], sys.argv
    sys.modules["__main__"], sys.argv = main, [spec.origin, *args]
    try:
        exec(compile(Path(spec.origin).read_bytes(), spec.origin, "exec"), vars(main))
    finally:
        sys.modules["__main__"], sys.argv = saved
        for name in [name for name in vars(main) if not name.startswith("__")]:
            del vars(main)[name]


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


@contextlib.contextmanager
def fresh_domainbed(*folders: Path, hook: bool = True):
    """DomainBed and this package imported afresh while the block runs, as a new interpreter
    started with ``PYTHONPATH=FOLDERS`` imports them: what it imports from them (an installed
    plugin's entry points and modules) is seen, every registration happens again, on the
    block's first import of DomainBed, through the start-up hook (not installed with
    ``hook=False``, as under ``DMG_DOMAINBED_DISABLE=1``). Afterwards this process has its own
    modules, import path, hook and ``sys.excepthook`` back, untouched. Import what the block
    uses inside it: a name imported before is the module of before."""
    import importlib
    import warnings

    def ours(name: str) -> bool:
        if name.partition(".")[0] in ("domainbed", "dmg_domainbed"):
            return True
        location = getattr(sys.modules[name], "__file__", None) or ""
        return any(Path(location).is_relative_to(folder) for folder in folders)

    saved_modules = dict(sys.modules)
    saved = list(sys.path), list(sys.meta_path), sys.excepthook
    for name in [name for name in sys.modules if ours(name)]:
        del sys.modules[name]
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "DomainBedImportWatcher"]
    sys.path[:0] = [str(folder) for folder in folders]
    importlib.invalidate_caches()
    try:
        with warnings.catch_warnings():
            # DomainBed's sources compiled again (this environment writes no bytecode) warn of
            # their invalid escapes, as in every new interpreter: not this block's business
            warnings.filterwarnings("ignore", "invalid escape sequence", DeprecationWarning)
            if hook:
                importlib.import_module("dmg_domainbed._startup").install()
            yield
    finally:
        for name in [name for name in sys.modules if ours(name)]:
            del sys.modules[name]
        sys.modules.update(saved_modules)
        sys.path[:], sys.meta_path[:], sys.excepthook = saved


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
    from dmg_domainbed import synthetic
    from dmg_domainbed.algorithms.sfmoe import weights as deit_weights
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


def reload(run: Path):
    """The algorithm of a run folder's ``model.pkl`` (or of a model file saved as train.py saves
    one), rebuilt as DomainBed's scripts rebuild it (the class by name, ``load_state_dict``), in
    eval mode, and the checkpoint."""
    import torch
    from domainbed import algorithms

    model = run / "model.pkl" if run.is_dir() else run
    checkpoint = torch.load(model, weights_only=False)
    algorithm = algorithms.get_algorithm_class(checkpoint["args"]["algorithm"])(
        checkpoint["model_input_shape"],
        checkpoint["model_num_classes"],
        checkpoint["model_num_domains"],
        checkpoint["model_hparams"],
    )
    algorithm.load_state_dict(checkpoint["model_dict"])
    return algorithm.eval(), checkpoint


def assert_masks_on_resnet_channels(model, domains: int, units: tuple[int, ...]) -> None:
    """A reloaded DMG model on a ResNet (``model.network.featurizer.network``) masks the inputs
    of layer3, layer4 and the classifier, ``units`` channels each, one logit per domain; the
    input layer3 receives is layer2's output scaled per channel by the domain's soft mask."""
    import torch

    resnet = model.network.featurizer.network
    assert model.masks.layer_names == [
        "featurizer.network.layer3",
        "featurizer.network.layer4",
        "classifier",
    ]
    assert [tuple(logits.shape) for logits in model.masks.logits] == [(domains, u) for u in units]
    seen = {}
    resnet.layer2.register_forward_hook(lambda m, i, out: seen.setdefault("layer2", out))
    resnet.layer3.register_forward_pre_hook(lambda m, args: seen.setdefault("layer3", args[0]))
    domain = domains - 1
    with torch.no_grad(), model.masks.per_example(torch.tensor([domain]), mode="soft"):
        model.network(torch.randn(1, 3, 224, 224))
    mask = torch.sigmoid(model.masks.logits[0][domain]).view(1, -1, 1, 1)
    assert seen["layer3"].shape[1] == units[0] and seen["layer3"].shape[2:] == (28, 28)
    torch.testing.assert_close(seen["layer3"], seen["layer2"] * mask)


def held_out_logits(run: Path, test_env: int, images: int = 2):
    """``predict``'s logits for the first ``images`` images of the held-out domain ``test_env``,
    by the run's model reloaded from ``model.pkl`` (:func:`reload`) on the run's dataset, built
    as train.py builds it; and those images."""
    import torch
    from domainbed import datasets

    model, checkpoint = reload(run)
    dataset = datasets.get_dataset_class(checkpoint["args"]["dataset"])(
        checkpoint["args"]["data_dir"], [test_env], checkpoint["model_hparams"]
    )
    x = torch.stack([dataset[test_env][i][0] for i in range(images)])
    with torch.no_grad():
        return model.predict(x), x


def erm_sweep_args(data_dir: Path, output_dir: Path, *more: str) -> list[str]:
    """Arguments of DomainBed's sweep script (after its command) for ERM on RotatedDigits, one
    hparam setting and trial, each test domain alone (4 jobs), without asking to confirm."""
    return [
        *("--datasets", "RotatedDigits", "--algorithms", "ERM"),
        *("--n_hparams", "1", "--n_trials", "1", "--single_test_envs"),
        *("--data_dir", str(data_dir), "--output_dir", str(output_dir), "--skip_confirmation"),
        *more,
    ]
