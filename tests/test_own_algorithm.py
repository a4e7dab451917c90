"""docs/own_algorithm.md, followed as written: its package, made of the page's own code blocks
and installed, passes ``check-algorithm``, trains under DomainBed's ``train``, and its runs are
read by DomainBed's ``collect_results`` and this package's ``report``. All in this process, with
DomainBed imported afresh where the package is installed (:func:`tests.helpers.fresh_domainbed`),
but for how ``train`` ends as a process on a misspelt hparam."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .helpers import cli, domainbed_env, domainbed_script, fresh_domainbed, run_domainbed
from .test_averaging import assert_train_py_saves_the_average
from .test_check_algorithm import install

REPOSITORY = Path(__file__).resolve().parents[1]
PAGE = REPOSITORY / "docs" / "own_algorithm.md"
STEPS = "5"


def page_files() -> dict[str, str]:
    """The page's code blocks that name a file (```toml pyproject.toml), by file name."""
    blocks = re.findall(r"^```\w+ (\S+)\n(.*?)^```", PAGE.read_text(), flags=re.M | re.S)
    return dict(blocks)


@pytest.fixture(scope="module")
def page_site(tmp_path_factory) -> Path:
    """The folder the page's package is installed into."""
    return install(page_files(), tmp_path_factory.mktemp("own_algorithm"))


def test_the_page_holds_a_whole_package_of_three_methods_and_an_hparam():
    files = page_files()
    assert sorted(files) == ["my_dg/__init__.py", "pyproject.toml"]
    assert 'SmoothERM = "my_dg:SmoothERM"' in files["pyproject.toml"]
    code = files["my_dg/__init__.py"]
    assert re.findall(r"^    def (\w+)", code, flags=re.M) == ["__init__", "update", "predict"]
    assert "HPARAMS = " in code and "dmg_domainbed" not in code


def test_the_pages_algorithm_passes_check_algorithm(page_site):
    with fresh_domainbed(page_site):
        code, printed, err = cli("check-algorithm", "SmoothERM")
    assert "SmoothERM: passed" in printed and code == 0, err


def test_the_pages_algorithm_trains_and_shows_in_collect_results_and_report(page_site, tmp_path):
    sweep = tmp_path / "sweep"
    with fresh_domainbed(page_site):
        domainbed_script(
            "train",
            *("--algorithm", "SmoothERM", "--dataset", "RotatedDigits", "--test_envs", "0"),
            *("--data_dir", str(tmp_path), "--steps", STEPS, "--output_dir", str(sweep / "run")),
            *("--hparams", '{"smoothing": 0.05}'),
        )
        collected = domainbed_script("collect_results", "--input_dir", str(sweep))
    record = json.loads((sweep / "run" / "results.jsonl").read_text().splitlines()[-1])
    assert record["args"]["algorithm"] == "SmoothERM" and record["hparams"]["smoothing"] == 0.05
    assert re.search(r"^SmoothERM +[\d.]+ \+/- ", collected, flags=re.M), collected
    report = tmp_path / "report"  # the report reads the records only: in-process
    code, _, err = cli("report", "--input_dir", str(sweep), "--output_dir", str(report))
    assert code == 0, err
    assert "SmoothERM" in (report / "results.md").read_text()


def test_the_pages_algorithm_evaluates_and_saves_its_averaged_weights(
    page_site, tmp_path, monkeypatch
):
    """A plugin of another package gets ``averaging`` as DomainBed's and this package's do."""
    with fresh_domainbed(page_site):
        args = ["--dataset", "RotatedDigits", "--data_dir", str(tmp_path)]
        assert_train_py_saves_the_average(
            "SmoothERM", {"smoothing": 0.05}, args, None, tmp_path / "run", monkeypatch
        )


def test_a_misspelt_hparam_of_the_pages_algorithm_stops_train_with_the_message(page_site, tmp_path):
    """A plugin that declares its hparams as a plain mapping, without this package's base
    class: the names are checked all the same, and the process ends with the message alone (a
    process: what it prints as it ends, and its exit status)."""
    page_env = domainbed_env(PYTHONPATH=str(page_site))
    run = tmp_path / "run"
    result = run_domainbed(
        "train",
        *("--algorithm", "SmoothERM", "--dataset", "RotatedDigits", "--steps", STEPS),
        *("--data_dir", str(tmp_path), "--output_dir", str(run)),
        *("--hparams", '{"smoothin": 0.05}'),
        env=page_env,
        check=False,
    )
    assert result.returncode == 1
    err = (run / "err.txt").read_text()
    message = "SmoothERM does not know hparam 'smoothin' (did you mean 'smoothing'?)"
    assert err.startswith(f"dmg-domainbed: error: {message}: ") and err.count("\n") == 1
    assert "(for SmoothERM on RotatedDigits)" in err and "Traceback" not in result.stdout
    assert not (run / "results.jsonl").exists()


def test_the_pages_sweep_runs_its_jobs_at_once_with_a_registered_launcher():
    from domainbed import command_launchers

    commands = re.findall(
        r"^python -m domainbed\.scripts\.sweep launch .*?[^\\]$",
        PAGE.read_text(),
        flags=re.M | re.S,
    )
    assert len(commands) == 1
    launcher = re.search(r"--command_launcher (\S+)", commands[0]).group(1)
    assert launcher in command_launchers.REGISTRY
    # DomainBed's `local` runs the jobs one after another; the page's runs them at once
    assert launcher == "local_parallel"
