"""Real Slurm clusters for the tests in this folder, started once per test run (see cluster.py).

Where Slurm is missing, the fixtures install Debian's packages when this process may (root and
apt-get); otherwise the tests skip with the reason. On CI (``CI=true``) a cluster that cannot be
started fails the tests instead: the launcher is only proven on a real cluster.
"""

from __future__ import annotations

import os
import sys
import time

import pytest

from ..helpers import domainbed_env
from .cluster import ClusterUnavailable, SlurmCluster, start_cluster


def _on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def _cluster(tmp_path_factory, accounting: bool):
    if not sys.platform.startswith("linux"):
        reason = f"a test cluster needs Linux (this is {sys.platform})"
    else:
        root = tmp_path_factory.mktemp("slurm_accounting" if accounting else "slurm")
        try:
            cluster = start_cluster(root, accounting)
        except ClusterUnavailable as error:
            reason = str(error)
        else:
            try:
                yield cluster
            finally:
                cluster.stop()
            return
    if _on_ci():
        pytest.fail(f"CI needs a real Slurm cluster and none could be started: {reason}", False)
    pytest.skip(f"no real Slurm cluster: {reason}")


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A cluster with accounting (slurmdbd over MariaDB), as real clusters have."""
    yield from _cluster(tmp_path_factory, accounting=True)


@pytest.fixture(scope="session")
def cluster_without_accounting(tmp_path_factory):
    """A cluster without accounting: no ``sacct``, submitit sees every state as UNKNOWN."""
    yield from _cluster(tmp_path_factory, accounting=False)


def job_environment(cluster: SlurmCluster, **settings: str) -> dict[str, str]:
    """The environment of a sweep on ``cluster``: this python first on PATH (the jobs get it
    through sbatch), the cluster's SLURM_CONF, one thread per job and the launcher's settings
    (``cpus="1"`` becomes ``DMG_SUBMITIT_CPUS=1``)."""
    env = cluster.env(domainbed_env())
    for name in [n for n in env if n.startswith("DMG_SUBMITIT_")]:
        del env[name]
    env.update({f"DMG_SUBMITIT_{name.upper()}": value for name, value in settings.items()})
    return env


@pytest.fixture
def use_cluster(monkeypatch):
    """Point this process's environment at a cluster, for launcher calls in this process."""

    def use(cluster: SlurmCluster, **settings: str) -> dict[str, str]:
        env = job_environment(cluster, **settings)
        for name in set(os.environ) - set(env):
            monkeypatch.delenv(name)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return env

    return use


def wait_until(predicate, timeout: float, what: str, interval: float = 0.5):
    """Poll ``predicate`` until it returns something true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {timeout:.0f} s")
        time.sleep(interval)
