"""Readers tell the truth about what they read: a sweep still running, failed or diverged jobs,
runs of two datasets, foreign and older records; DomainBed's numbers stay collect_results'."""

import json
import math
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from dmg_domainbed.locks import FolderLock
from tests.cli.test_report import as_collect_results_prints, collect_results_tables
from tests.helpers import cli, domainbed_script, run_python, runs_of, snapshot


def records_of(demo_sweep: Path, target: Path) -> Path:
    """A copy of the demo sweep's records and done files (no models): a sweep folder to change."""
    for folder in runs_of(demo_sweep).values():
        (target / folder.name).mkdir(parents=True)
        for name in ("results.jsonl", "done"):
            shutil.copy(folder / name, target / folder.name / name)
    return target


def rewrite(results: Path, change) -> None:
    records = [json.loads(line) for line in results.read_text().splitlines()]
    results.write_text("".join(json.dumps(change(r)) + "\n" for r in records))


def report(sweep: Path, output: Path) -> tuple[int, str, str]:
    return cli("report", "--input_dir", str(sweep), "--output_dir", str(output))


def cells(output: Path, algorithm: str, test_env: str) -> pd.DataFrame:
    """The cell of results.csv in the tables of training-domain validation."""
    results = pd.read_csv(output / "results.csv", dtype={"test_env": str})
    return results[
        (results["selection_method"] == "training-domain validation set")
        & (results["algorithm"] == algorithm)
        & (results["test_env"] == test_env)
    ]


def test_a_running_sweep_is_partial_and_its_jobs_are_named(demo_sweep, tmp_path):
    sweep = records_of(demo_sweep, tmp_path / "sweep")
    runs = runs_of(sweep)
    mid_run = runs[("DMG", 0)]  # at its first checkpoint
    (mid_run / "done").unlink()
    first = (mid_run / "results.jsonl").read_text().splitlines()[0]
    (mid_run / "results.jsonl").write_text(first + "\n")
    starting = runs[("CorGrad", 2)]  # started, no checkpoint yet
    for name in ("done", "results.jsonl"):
        (starting / name).unlink()
    (starting / "out.txt").write_text("")

    with FolderLock(sweep):
        code, printed, _ = report(sweep, tmp_path / "running")
    assert code == 0
    assert "Jobs: 24 in the sweep: 22 done, 2 running, 0 failed; 0 diverged." in printed
    assert "locked by `" in printed and f"(pid {os.getpid()} on " in printed
    assert f"DMG on RotatedDigits, test env 0, hparams 0, trial 0 ({mid_run.name})" in printed
    assert f"{starting.name} (no record yet)" in printed
    assert "The numbers are PARTIAL: 2 cell(s)" in printed
    output = tmp_path / "running"
    assert cells(output, "DMG", "0")["partial"].all()  # holds a run not done
    assert cells(output, "CorGrad", "2")["text"].eq("X").all()
    assert cells(output, "CorGrad", "2")["partial"].all()  # lacks the trial others have
    assert not cells(output, "ERM", "0")["partial"].any()
    assert cells(output, "DMG", "Avg")["partial"].all()
    markdown = (output / "results.md").read_text()
    assert "(partial)" in markdown and "The numbers are PARTIAL" in markdown

    # Its command gone, nothing runs the two jobs any more: they failed.
    code, printed, _ = report(sweep, tmp_path / "stopped")
    assert code == 0
    assert "Jobs: 24 in the sweep: 22 done, 0 running, 2 failed; 0 diverged." in printed
    assert "failed (no 'done' file and nothing runs them; see err.txt" in printed


def test_a_job_the_launcher_still_runs_is_running(demo_sweep, tmp_path, monkeypatch):
    from domainbed import command_launchers

    sweep = records_of(demo_sweep, tmp_path / "sweep")
    queued = runs_of(sweep)[("ERM", 3)]
    (queued / "done").unlink()

    def launcher(commands):
        raise AssertionError("report launches nothing")

    launcher.running_jobs = lambda folders, environ: {f: "PENDING" for f in folders if f == queued}
    monkeypatch.setitem(command_launchers.REGISTRY, "queue", launcher)
    code, printed, _ = report(sweep, tmp_path / "o")
    assert code == 0
    assert "23 done, 1 running, 0 failed" in printed
    assert "running (launcher queue says they are queued or running)" in printed


def test_a_finished_sweep_asks_no_launcher(demo_sweep):
    """With every job done no launcher (nor a launcher plugin, which may warn) is loaded."""
    script = f"""
import sys
from dmg_domainbed.reporting.jobs import sweep_jobs
jobs = sweep_jobs({str(demo_sweep)!r})
assert jobs.why_running == "", jobs.why_running
assert "domainbed.command_launchers" not in sys.modules
"""
    run_python("-c", script)


def test_a_diverged_run_is_flagged_wherever_its_numbers_appear(demo_sweep, tmp_path):
    sweep = records_of(demo_sweep, tmp_path / "sweep")
    diverged = runs_of(sweep)[("ERM", 1)]
    rewrite(
        diverged / "results.jsonl", lambda r: {**r, "loss": r["loss"] if r["step"] else math.nan}
    )
    output = tmp_path / "o"
    code, printed, _ = report(sweep, output)
    assert code == 0
    assert "24 done, 0 running, 0 failed; 1 diverged." in printed
    named = f"ERM on RotatedDigits, test env 1, hparams 0, trial 0 ({diverged.name})"
    assert f"{named}: loss nan at step 0" in printed
    assert "1 cell(s) hold runs whose loss diverged (marked 'diverged')" in printed
    assert cells(output, "ERM", "1")["diverged_runs"].eq(1).all()
    assert cells(output, "ERM", "Avg")["diverged_runs"].eq(1).all()
    assert cells(output, "ERM", "0")["diverged_runs"].eq(0).all()
    assert "| 42.5 (one trial, diverged) |" in (output / "results.md").read_text().replace("  ", "")
    chosen = pd.read_csv(output / "selected_hparams.csv", keep_default_na=False)
    flagged = chosen[chosen["diverged"] != ""]
    assert set(zip(flagged["algorithm"], flagged["test_env"])) == {("ERM", 1)}
    comparisons = pd.read_csv(output / "comparisons.csv", dtype={"test_env": str})
    with_it = comparisons["test_env"].isin(["1", "Avg"])
    assert comparisons[with_it]["diverged_runs"].eq(1).all()
    assert comparisons[~with_it]["diverged_runs"].eq(0).all()
    assert "(diverged)" in (output / "comparisons.md").read_text()
    # Flagged, not dropped: the numbers are still those collect_results prints.
    expected = collect_results_tables(
        domainbed_script("collect_results", "--input_dir", str(sweep))
    )
    table = expected[
        "Dataset: RotatedDigits, model selection method: training-domain validation set"
    ]
    mine = pd.read_csv(output / "results.csv", dtype=str)
    erm = mine[
        (mine["algorithm"] == "ERM")
        & (mine["selection_method"] == "training-domain validation set")
    ]
    assert as_collect_results_prints(erm) == table["ERM"]


def test_runs_of_two_datasets_each_drawn_from_its_own_runs(demo_sweep, tmp_path):
    sweep = records_of(demo_sweep, tmp_path / "sweep")
    for (algorithm, env), folder in runs_of(demo_sweep).items():
        if algorithm == "ERM":  # ERM alone on a second dataset, with its six environments
            copy = sweep / f"mnist_{env}"
            shutil.copytree(sweep / folder.name, copy)
            rewrite(
                copy / "results.jsonl",
                lambda r, c=copy: {
                    **r,
                    **{f"env{e}_{part}_acc": 0.5 for e in (4, 5) for part in ("in", "out")},
                    "args": {**r["args"], "dataset": "RotatedMNIST", "output_dir": str(c)},
                },
            )
    output = tmp_path / "o"
    code, printed, _ = report(sweep, output)
    assert code == 0
    drawn = sorted(p.name for p in output.glob("*.png"))
    assert drawn == [
        "accuracy_RotatedDigits.png",
        "accuracy_RotatedMNIST.png",
        "dmg_diagnostics_RotatedDigits.png",
    ]
    # Test domains no run held out, and algorithms without runs there, are not 'partial'.
    results = pd.read_csv(output / "results.csv")
    assert not results["partial"].any()
    assert "Jobs: all 28 jobs of the sweep are done." in printed


FOREIGN = '{"epoch": 1, "loss": 0.5, "accuracy": 0.7}\n'


@pytest.mark.parametrize("command", ["report", "select", "evaluate", "masks"])
def test_another_tool_s_results_are_refused_naming_the_field(command, tmp_path):
    run = tmp_path / "sweep" / "run"
    run.mkdir(parents=True)
    (run / "results.jsonl").write_text(FOREIGN)
    (run / "model.pkl").write_bytes(b"")
    given = (
        ["--input_dir", str(run.parent)]
        if command in ("report", "select")
        else ["--run_dir", str(run)]
    )
    code, _, message = cli(command, *given, "--output_dir", str(tmp_path / "o"))
    assert code == 2
    assert (
        f"'{run / 'results.jsonl'}' does not hold records as DomainBed's train.py writes them"
        in message
    )
    assert "line 1: it has no step, hparams, args (read by" in message
    assert not (tmp_path / "o").exists()


ARGS = {"algorithm": "ERM", "dataset": "RotatedDigits", "test_envs": [3], "trial_seed": 0}
ARGS |= {"hparams_seed": 0, "seed": 0, "holdout_fraction": 0.2, "data_dir": "d", "output_dir": "o"}
ACCURACIES = {f"env{i}_{part}_acc": 0.5 for i in range(4) for part in ("in", "out")}
RECORD = {"args": ARGS, "hparams": {"lr": 0.001}, "step": 0, **ACCURACIES}
WRONG = [  # (field, its value, what the message says was found and is expected)
    ("args.hparams_seed", "a", 'args.hparams_seed is "a" (text); expected a whole number'),
    ("args.trial_seed", None, "args.trial_seed is null (null); expected a whole number"),
    ("args.test_envs", "3", 'args.test_envs is "3" (text); expected a list of environment'),
    ("hparams", [], "hparams is [] (a list); expected a JSON object of hparams"),
    ("hparams.precision", ["bf16"], 'hparams.precision is ["bf16"] (a list); expected text'),
    ("env0_out_acc", None, "env0_out_acc is null (null); expected a number (an accuracy)"),
    ("args.algorithm", 5, "args.algorithm is 5 (a number); expected text"),
    ("", [1, 2], "the line is [1, 2] (a list); expected a JSON object"),
]


@pytest.mark.parametrize("command", ["report", "evaluate"])
@pytest.mark.parametrize(("field", "value", "said"), WRONG, ids=[w[0] or "list" for w in WRONG])
def test_a_field_of_the_wrong_type_is_named_with_its_line(command, field, value, said, tmp_path):
    run = tmp_path / "sweep" / "run"
    run.mkdir(parents=True)
    wrong = json.loads(json.dumps(RECORD))  # a copy to change
    if field:
        *tables, key = field.split(".")
        parent = wrong[tables[0]] if tables else wrong
        parent[key] = value
    else:
        wrong = value
    (run / "results.jsonl").write_text(json.dumps(RECORD) + "\n" + json.dumps(wrong) + "\n")
    (run / "done").write_text("")
    given = ["--input_dir", str(run.parent)] if command == "report" else ["--run_dir", str(run)]
    code, _, message = cli(command, *given, "--output_dir", str(tmp_path / "o"))
    assert code == 2
    assert f"'{run / 'results.jsonl'}' does not hold records as DomainBed's train.py" in message
    assert f"line 2: {said}" in message
    assert not (tmp_path / "o").exists()


def test_older_records_are_read_where_they_can_be(demo_sweep, tmp_path):
    sweep = tmp_path / "sweep"
    run = sweep / "older"
    shutil.copytree(runs_of(demo_sweep)[("DMG", 2)], run)
    rewrite(
        run / "results.jsonl",
        lambda r: {**r, "args": {k: v for k, v in r["args"].items() if "holdout" not in k}},
    )
    before = snapshot(run)
    code, _, message = cli("evaluate", "--run_dir", str(run), "--output_dir", str(tmp_path / "e"))
    assert code == 2
    assert (
        "line 1: it has no args.holdout_fraction (read by the rebuilding of train.py's data splits)"
        in message
    )
    assert not (tmp_path / "e").exists() and snapshot(run) == before
    code, printed, _ = report(sweep, tmp_path / "r")  # collect_results needs no split
    assert code == 0 and "DMG" in printed


def test_an_empty_folder_is_named_as_one_and_not_as_a_failed_job(demo_sweep, tmp_path):
    sweep = records_of(demo_sweep, tmp_path / "sweep")
    (sweep / "0a1b2c").mkdir()  # a job folder made, nothing written into it
    code, printed, _ = report(sweep, tmp_path / "o")
    assert code == 0
    assert "24 done, 0 running, 0 failed, 1 empty folder(s); 0 diverged." in printed
    assert "empty folders (nothing in them: no job ran there" in printed
    assert "0a1b2c (empty)" in printed and "--delete-incomplete" in printed
    assert "see err.txt" not in printed
