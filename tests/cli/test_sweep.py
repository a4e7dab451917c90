"""``dmg-domainbed sweep``: dry runs create nothing; the demo sweep file runs for real through
local_parallel and through submitit's local executor, and DomainBed's collect_results reads it."""

import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from domainbed import model_selection
from domainbed.lib import reporting

from dmg_domainbed.cli import main

from ..helpers import domainbed_env, domainbed_script

SWEEPS = Path(__file__).parents[2] / "sweeps"


@pytest.fixture
def job_env(monkeypatch):
    """The environment of DomainBed subprocesses: this python first on PATH, 1 thread per job."""
    for name in [n for n in os.environ if n.startswith(("DMG_SUBMITIT_", "DMG_LOCAL_"))]:
        monkeypatch.delenv(name)
    for name, value in domainbed_env(DMG_LOCAL_PARALLEL_JOBS="2").items():
        if os.environ.get(name) != value:
            monkeypatch.setenv(name, value)
    return monkeypatch


def small_demo(tmp_path: Path) -> Path:
    """sweeps/demo.toml cut to DMG, one hparams seed, one trial and 20 steps (4 jobs)."""
    text = (SWEEPS / "demo.toml").read_text()
    for pattern, replacement in [
        (r"(?m)^algorithms = .*$", 'algorithms = ["DMG"]'),
        (r"(?m)^n_hparams = .*$", "n_hparams = 1"),
        (r"(?m)^n_trials = .*$", "n_trials = 1\nsteps = 20"),
        (r"(?m)^output_dir = .*$", f'output_dir = "{tmp_path / "sweep"}"'),
    ]:
        text, count = re.subn(pattern, replacement, text)
        assert count == 1, pattern
    path = tmp_path / "demo_small.toml"
    path.write_text(text)
    return path


def test_dry_run_lists_the_jobs_and_creates_nothing(job_env, tmp_path, capsys):
    out = tmp_path / "sweep"
    code = main(
        [
            "sweep",
            str(SWEEPS / "pacs_resnet50.toml"),
            "--dry-run",
            "--commands",
            "--data_dir",
            str(tmp_path / "data"),
            "--output_dir",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0
    assert "960 job(s): 960 to launch, 0 done, 0 incomplete" in printed
    assert re.search(r"PACS +DMG +240 +0 +0", printed)
    assert printed.count("python -m domainbed.scripts.train ") == 960
    assert "Launcher: submitit" in printed
    assert "Dry run: nothing was created or launched." in printed
    assert not out.exists() and not (tmp_path / "data").exists()


@pytest.mark.parametrize("path", sorted(SWEEPS.glob("paper_*.toml")), ids=lambda p: p.stem)
def test_paper_protocol_files_dry_run(path, job_env, tmp_path, capsys):
    code = main(
        ["sweep", str(path), "--dry-run", "--commands", "--data_dir", str(tmp_path / "data")]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    jobs = 36 if "pacs" in path.stem else 54  # 3 algorithms x test domains x 3 trials
    assert f"{jobs} job(s): {jobs} to launch" in printed
    assert printed.count("--save_model_every_checkpoint  --seed") == jobs
    assert printed.count("--hparams_seed 0 ") == jobs  # DomainBed's defaults + the fixed ones
    assert "Dry run: nothing was created or launched." in printed


@pytest.mark.parametrize(
    "name, extra, message",
    [
        ("demo", ["--launcher", "nope"], "unknown launcher 'nope'"),
        ("demo", ["--launcher", "submitit"], "no Slurm here"),
        ("pacs_resnet18", [], "the jobs would fail before their first step:\n  PACS data missing"),
    ],
)
def test_a_sweep_that_cannot_run_stops_before_any_job_folder(
    name, extra, message, job_env, tmp_path, capsys
):
    # Only this python on PATH: no Slurm tools, even on a machine that has them.
    job_env.setenv("PATH", os.path.dirname(sys.executable))
    out = tmp_path / "sweep"
    code = main(
        [
            "sweep",
            str(SWEEPS / f"{name}.toml"),
            "--data_dir",
            str(tmp_path),
            "--output_dir",
            str(out),
            *extra,
        ]
    )
    assert code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    "command, given, allowed",
    [
        (["sweep", "{file}", "--dry-run"], "[sweep] n_hparams = 1000000000", "1 and 1000"),
        (["sweep", "{file}", "--dry-run"], "[sweep] n_trials = 1000000000", "1 and 100"),
        (
            ["demo", "--hparams_samples", "1000000000"],
            "--hparams_samples = 1000000000",
            "1 and 1000",
        ),
        (["demo", "--trials", "1000000000"], "--trials = 1000000000", "1 and 100"),
    ],
    ids=["sweep n_hparams", "sweep n_trials", "demo hparams samples", "demo trials"],
)
def test_a_sweep_too_large_to_plan_is_refused_before_any_work(
    command, given, allowed, tmp_path, capsys
):
    # DomainBed makes every job of a sweep in memory first: a billion would fill it for minutes.
    key = given.split()[-3]
    sweep_file = tmp_path / "huge.toml"
    sweep_file.write_text(
        f'[sweep]\nalgorithms = ["ERM"]\ndatasets = ["RotatedDigits"]\n{key} = 1000000000\n'
    )
    out = tmp_path / "out"
    argv = [part.format(file=sweep_file) for part in command] + ["--output_dir", str(out)]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert f"{given} is not valid: it must be an integer between {allowed}" in error
    assert not out.exists()


def test_demo_sweep_runs_through_both_launchers_and_collect_results_reads_it(
    job_env, tmp_path, capfd
):
    sweep_file, sweep_dir = small_demo(tmp_path), tmp_path / "sweep"

    assert main(["sweep", str(sweep_file)]) == 0  # the file's launcher: local_parallel
    jobs = sorted(d for d in sweep_dir.iterdir() if d.name != ".submitit")
    assert len(jobs) == 4 and all((d / "done").exists() for d in jobs)
    assert all((d / "launcher.log").exists() for d in jobs)

    # One job "crashed" and its folder was removed: only it runs again, through submitit.
    crashed = jobs[0]
    (crashed / "done").unlink()
    job_env.setenv("DMG_SUBMITIT_CLUSTER", "local")
    job_env.setenv("DMG_SUBMITIT_GPUS", "0")
    capfd.readouterr()
    assert main(["sweep", str(sweep_file), "--launcher", "submitit"]) == 0
    assert "1 incomplete job(s) are left as they are" in capfd.readouterr().out
    assert (crashed / "launcher.log").exists() and not (crashed / "done").exists()

    shutil.rmtree(crashed)
    assert main(["sweep", str(sweep_file), "--launcher", "submitit"]) == 0
    assert (crashed / "done").exists() and not (crashed / "launcher.log").exists()
    assert (crashed / "submitit.out").resolve().is_file()
    assert "submitit: all 1 job(s) finished" in capfd.readouterr().out

    capfd.readouterr()
    assert main(["sweep", str(sweep_file), "--dry-run"]) == 0
    assert "4 job(s): 0 to launch, 4 done, 0 incomplete" in capfd.readouterr().out

    # DomainBed's collect_results in this process; a new process of it finds the plugin's
    # algorithms too (tests/test_domainbed_scripts.py).
    table = domainbed_script("collect_results", "--input_dir", str(sweep_dir))
    assert "Total records: 8" in table  # 4 jobs x 2 checkpoints (steps 0 and 19)
    selection = table.split("training-domain validation set")[1]
    row = next(line for line in selection.splitlines() if line.startswith("DMG"))
    assert len(re.findall(r"\d+\.\d \+/- \d+\.\d", row)) == 4 and " X " not in row


def test_an_unknown_demo_algorithm_is_named_with_the_flag_once(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--algorithms", "DMG", "DGM", "--output_dir", str(out)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("dmg-domainbed demo: error: --algorithms: unknown algorithm(s) DGM;")
    assert error.count("dmg-domainbed demo") == 1 and "valid algorithms: ERM, " in error
    assert not out.exists()


def test_a_search_once_sweep_runs_its_two_stages_and_report_labels_them(job_env, tmp_path, capfd):
    # ERM on RotatedDigits' 4 test domains, 2 hparams seeds x 3 trials: stage 1 is 2 x 4 jobs
    # on trial 0, stage 2 the winner of each test domain on trials 1 and 2 (8 jobs).
    sweep_dir = tmp_path / "sweep"
    sweep_file = tmp_path / "once.toml"
    sweep_file.write_text(
        '[sweep]\nalgorithms = ["ERM"]\ndatasets = ["RotatedDigits"]\nn_hparams = 2\n'
        'n_trials = 3\nsteps = 2\nsingle_test_envs = true\nprotocol = "search_once"\n'
        f'data_dir = "."\noutput_dir = "{sweep_dir}"\n[launcher]\nname = "local_parallel"\n'
    )
    assert main(["sweep", str(sweep_file)]) == 0
    stage_one = sorted(sweep_dir.iterdir())
    assert len(stage_one) == 8 and all((d / "done").exists() for d in stage_one)

    # stage 1 not done (a job stopped): a rerun says so and launches nothing of stage 2
    (stage_one[0] / "done").rename(tmp_path / "done")
    capfd.readouterr()
    assert main(["sweep", str(sweep_file)]) == 0
    assert "not launched while stage 1 is incomplete (1 of its jobs are not done)" in (
        capfd.readouterr().out
    )
    assert sorted(sweep_dir.iterdir()) == stage_one
    (tmp_path / "done").rename(stage_one[0] / "done")

    assert main(["sweep", str(sweep_file)]) == 0
    records = reporting.load_records(str(sweep_dir))
    assert len({r["args"]["output_dir"] for r in records}) == 16
    assert {r["hparams"]["protocol"] for r in records} == {"search_once"}
    for env in range(4):
        held_out = records.filter(lambda r, env=env: r["args"]["test_envs"] == [env])
        trial_zero = held_out.filter(lambda r: r["args"]["trial_seed"] == 0)
        ranked = model_selection.IIDAccuracySelectionMethod.hparams_accs(trial_zero)
        winner = ranked[0][1][0]["args"]["hparams_seed"]
        later = held_out.filter(lambda r: r["args"]["trial_seed"] != 0)
        assert {(r["args"]["trial_seed"], r["args"]["hparams_seed"]) for r in later} == {
            (1, winner),
            (2, winner),
        }

    capfd.readouterr()
    assert main(["report", "--input_dir", str(sweep_dir), "--output_dir", str(tmp_path / "r")]) == 0
    printed = capfd.readouterr().out
    assert re.search(r"\| ERM \(search_once\) +\| [\d.]+ \+/- [\d.]+ ", printed)
    assert not re.search(r"\| ERM +\|", printed)
