"""Shared test set-up: the real DomainBed must be importable; helpers to run its scripts."""

from __future__ import annotations

import sys

import pytest

from dmg_domainbed import TESTED_DOMAINBED_COMMIT

SETUP_HELP = f"""DomainBed is not importable by {sys.executable}.
The tests import and run the real DomainBed (it is not on the package registry):
  git clone https://github.com/facebookresearch/DomainBed /opt/DomainBed
  git -C /opt/DomainBed checkout {TESTED_DOMAINBED_COMMIT}
  python3 -c "import site; print(site.getsitepackages()[0])"   # -> SITE
  echo /opt/DomainBed > SITE/domainbed_checkout.pth
then check: python3 -c "import domainbed.algorithms"
"""


def pytest_configure(config):
    try:
        import domainbed.algorithms  # noqa: F401
    except ImportError as error:
        pytest.exit(f"{SETUP_HELP}\n(import failed: {error})", returncode=4)
    import torch

    # The in-process tests use tiny tensors: extra threads only contend for the cores.
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """One real ``dmg-domainbed demo`` shared by the tests: DomainBed's own sweep script and
    train processes, every algorithm of this package and ERM on every test domain of
    RotatedDigits, 30 steps. Returns (output folder, what it printed)."""
    from .helpers import DEMO_ALGORITHMS, DEMO_STEPS, run_cli

    output = tmp_path_factory.mktemp("demo") / "demo"
    result = run_cli(
        "demo", "--output_dir", str(output), "--steps", DEMO_STEPS, "--algorithms", *DEMO_ALGORITHMS
    )
    return output, result.stdout


@pytest.fixture(scope="session")
def demo_sweep(demo_run):
    """The DomainBed sweep folder of :func:`demo_run`."""
    return demo_run[0] / "sweep"
