"""Shared test set-up: the real DomainBed, and the runs the tests share.

Tests that need DomainBed import and run the real one. Without it, they fail (collection errors
for modules that import it, a failure for every other test) and the run ends with the set-up
instructions; only the modules marked ``no_domainbed`` (pure maths on torch) run and pass.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
import sys

import pytest

from dmg_domainbed import TESTED_DOMAINBED_COMMIT

SETUP_HELP = f"""DomainBed is not importable by {sys.executable}.
The tests import and run the real DomainBed (it is not on the package registry). Fetch it at the
tested commit {TESTED_DOMAINBED_COMMIT[:12]} and make it importable in this environment:
  dmg-domainbed install-domainbed            # or --from PATH_OR_URL without GitHub
then check: python -c "import domainbed.algorithms"
"""
NO_DOMAINBED = "no_domainbed"
_domainbed_error: ImportError | None = None


def pytest_configure(config):
    global _domainbed_error
    config.addinivalue_line(
        "markers", f"{NO_DOMAINBED}: pure maths on torch, runs without DomainBed installed"
    )
    controller = bool(getattr(config.option, "numprocesses", 0)) and not hasattr(
        config, "workerinput"
    )
    try:
        if controller:  # pytest-xdist's, which runs no test: finding DomainBed is enough
            if importlib.util.find_spec("domainbed.algorithms") is None:
                raise ImportError("No module named 'domainbed.algorithms'")
        else:
            import domainbed.algorithms  # noqa: F401
    except ImportError as error:
        _domainbed_error = error
        # Modules that import DomainBed fail to collect; the pure ones still run.
        config.option.continue_on_collection_errors = True
    if not controller:
        import torch

        # The in-process tests use tiny tensors: extra threads only contend for the cores.
        torch.set_num_threads(1)


_RUNNERS = ("pytest", "pytest-xdist")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    """Stop before any test runs where ``--dist loadgroup`` would not group.

    pytest-xdist 3.8 marks a test's group by appending ``@GROUP`` to its node id, which pytest
    9.2's structured node ids ignore (pytest-dev/pytest-xdist#1386): every test then goes to
    any worker, so the shared demo run, the test Slurm cluster and module-wide fixtures are
    made once per worker, and the run does that work again without failing. Every test here
    has a group (:func:`pytest_collection_modifyitems`), so a worker's ids without one say so.
    """
    if node.config.option.dist == "loadgroup" and not all("@" in i for i in ids):
        versions = ", ".join(f"{name} {importlib.metadata.version(name)}" for name in _RUNNERS)
        pytest.exit(
            f"pytest-xdist does not group the tests with {versions} (the shared runs would be "
            "made once per worker): install the versions the test extra allows, "
            'python -m pip install -e ".[domainbed,test]", or run in one process with -n 0',
            returncode=pytest.ExitCode.USAGE_ERROR,
        )


# Fixtures computed once per worker process, and the tests that need them.
_SHARED_DEMO = {"demo_run", "demo_sweep", "copied_run"}
_SHARED_FOLDERS = ("slurm", "image_path")  # one test cluster; the image-path training
# Marked ``slow`` here, for what they share rather than what their module says: the demo run's
# tests, the test Slurm cluster's and the image path's ResNet-50 training (other slow tests
# carry the mark in their modules).
_SLOW_FOLDERS = ("slurm", "image_path")
_GPU_TRAINING = "trained"  # tests/gpu/test_gpu_algorithms.py's fixture, one per algorithm


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """Mark the tests of the shared demo run, the test Slurm cluster and the image path ``slow``.

    With pytest-xdist's ``--dist loadgroup``: the tests of one module run on one worker (its
    module-wide fixtures are made once), and so do all tests of the shared demo run, of the
    test Slurm cluster and of the image path; the GPU lane's tests of one algorithm's training
    (a module-wide fixture per algorithm) run on one worker, each algorithm on its own."""
    for item in items:
        path = item.path.relative_to(config.rootpath)
        params = getattr(getattr(item, "callspec", None), "params", {})
        shares_the_demo = bool(_SHARED_DEMO & set(getattr(item, "fixturenames", ())))
        if shares_the_demo or path.parts[1:2] and path.parts[1] in _SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)
        if shares_the_demo:
            group = "demo"
        elif path.parts[1:2] and path.parts[1] in _SHARED_FOLDERS:
            group = path.parts[1]
        elif path.parts[1:2] == ("gpu",) and _GPU_TRAINING in params:
            group = f"{path}[{params[_GPU_TRAINING]}]"
        else:
            group = str(path)
        item.add_marker(pytest.mark.xdist_group(group))


def pytest_runtest_setup(item):
    if _domainbed_error is not None and item.get_closest_marker(NO_DOMAINBED) is None:
        pytest.fail(f"{SETUP_HELP}(import failed: {_domainbed_error})", pytrace=False)


def pytest_terminal_summary(terminalreporter):
    if _domainbed_error is not None:
        terminalreporter.write_line(
            f"\nTests that need DomainBed failed: {_domainbed_error}\n{SETUP_HELP}", red=True
        )


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """One real ``dmg-domainbed demo`` shared by the tests: DomainBed's own sweep script and
    train processes, every algorithm of this package and ERM on every test domain of
    RotatedDigits, one trial of the default hparams, 30 steps. The command runs in this process
    (its sweep's jobs are new processes). Returns (output folder, what it printed)."""
    from .helpers import cli_launching, demo_args

    output = tmp_path_factory.mktemp("demo") / "demo"
    code, printed, errors = cli_launching(*demo_args(output))
    assert code == 0, f"{printed[-4000:]}\n{errors[-4000:]}"
    return output, printed


@pytest.fixture(scope="session")
def demo_sweep(demo_run):
    """The DomainBed sweep folder of :func:`demo_run`."""
    return demo_run[0] / "sweep"


@pytest.fixture
def copied_run(demo_sweep, tmp_path):
    """A copy of one run folder of the demo sweep, to damage freely."""
    from .helpers import runs_of

    def copy(algorithm: str, test_env: int = 0):
        target = tmp_path / "sweep" / f"{algorithm}_{test_env}"
        shutil.copytree(runs_of(demo_sweep)[(algorithm, test_env)], target)
        return target

    return copy
