"""Helpers of the CLI tests; the demo run they share is in tests/conftest.py."""

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest

from dmg_domainbed.cli import main


def cli(*args: str) -> tuple[int, str, str]:
    """``dmg-domainbed ARGS`` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def runs_of(sweep_dir: Path) -> dict[tuple[str, int], Path]:
    """Run folders of a sweep by (algorithm, first test env)."""
    runs = {}
    for results in sweep_dir.glob("*/results.jsonl"):
        args = json.loads(results.read_text().splitlines()[0])["args"]
        runs[(args["algorithm"], args["test_envs"][0])] = results.parent
    return runs


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Size and modification time of every file under ``folder``."""
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def copied_run(demo_sweep, tmp_path):
    """A copy of one run folder of the demo sweep, to damage freely."""

    def copy(algorithm: str, test_env: int = 0) -> Path:
        target = tmp_path / "sweep" / f"{algorithm}_{test_env}"
        shutil.copytree(runs_of(demo_sweep)[(algorithm, test_env)], target)
        return target

    return copy
