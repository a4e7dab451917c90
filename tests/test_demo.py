"""``dmg-domainbed demo``: a real DomainBed sweep, its progress, its resume and its report."""

import json
import re
import shutil
from pathlib import Path

import pytest

from dmg_domainbed.algorithms.importance_mask.importance_mask import ImportanceMask
from tests.helpers import (
    DEMO_ALGORITHMS,
    DEMO_STEPS,
    cli,
    cli_launching,
    demo_args,
    runs_of,
    snapshot,
)

N_JOBS = 4 * len(DEMO_ALGORITHMS)


def test_demo_runs_every_test_domain_and_reports(demo_run):
    output, printed = demo_run
    runs = runs_of(output / "sweep")
    assert sorted(runs) == sorted((a, env) for a in DEMO_ALGORITHMS for env in range(4))
    assert all((run / "done").exists() for run in runs.values())
    assert f"{N_JOBS} jobs, 0 already done, {N_JOBS} to run" in printed
    for n in range(1, N_JOBS + 1):
        assert f"[{n}/{N_JOBS}] done: " in printed
    # collect_results' own table, for every selection method with a result; one line, not
    # tables of X, for leave-one-domain-out (it needs runs that hold out two domains).
    for method in ("training-domain validation set", "test-domain validation set (oracle)"):
        assert f"-------- Dataset: RotatedDigits, model selection method: {method}" in printed
    assert "leave-one-domain-out cross-validation\n" not in printed
    assert (
        "Model selection leave-one-domain-out cross-validation: no result for any cell: it "
        "validates on runs that hold out two domains"
    ) in printed
    assert not re.search(r"^\S+(\s+X)+\s*$", printed, re.MULTILINE)
    # The paired comparisons with ERM (one trial: the difference, no interval) and the ranks.
    assert re.search(r"  DMG vs ERM: [-+][0-9.]+ points \(one trial: no interval", printed)
    assert "Average ranks across tasks (1 = best):" in printed
    report = output / "report"
    for name in (
        "results.csv",
        "averages.csv",
        "results.md",
        "selected_hparams.csv",
        "comparisons.csv",
        "comparisons.md",
        "ranks.csv",
        "ranks.md",
        "accuracy_RotatedDigits.png",
        "dmg_diagnostics_RotatedDigits.png",
        "in_domain.csv",
        "in_domain.md",
        "masks_DMG_test_env0.png",
        "masks_DMG_test_env3.png",
        "masks_ImportanceMask_test_env1.png",
    ):
        assert (report / name).stat().st_size > 0, name
    assert "Wall time:" in printed


def test_erm_with_its_weights_averaged_is_reported_beside_erm(demo_run):
    """The demo's second sweep, ERM with averaging = "sma", trains and saves the average through
    train.py; the report names it by those hparams, pairs it with ERM, and collect_results'
    own tables (of the first sweep) never see it."""
    import pandas as pd

    output, printed = demo_run
    start = int(DEMO_STEPS) // 6
    averaged = runs_of(output / "sweep_sma")
    assert sorted(averaged) == [("ERM", env) for env in range(4)]
    for run in averaged.values():
        last = json.loads((run / "results.jsonl").read_text().splitlines()[-1])
        assert (last["hparams"]["averaging"], last["hparams"]["averaging_start"]) == ("sma", start)
        assert (run / "done").exists() and (run / "model.pkl").exists()
    name = f'ERM (averaging="sma", averaging_start={start})'
    results = pd.read_csv(output / "report" / "results.csv")
    assert {"ERM", name} <= set(results["algorithm"])
    comparisons = pd.read_csv(output / "report" / "comparisons.csv")
    assert (comparisons.loc[comparisons["algorithm"] == name, "reference"] == "ERM").all()
    assert f"  {name} vs ERM: " in printed
    # collect_results reads the demo's own sweep: its records, not one of the averaged runs'
    own = sum(len(p.read_text().splitlines()) for p in (output / "sweep").glob("*/results.jsonl"))
    assert f"Total records: {own}\n" in printed


def test_importance_mask_jobs_get_the_schedule_scaled_to_the_demo_steps(demo_run):
    output, printed = demo_run
    scaled = ImportanceMask.run_length_hparams(int(DEMO_STEPS))
    assert f"ImportanceMask: hparams sized for {DEMO_STEPS} steps" in printed
    for (algorithm, _), run in runs_of(output / "sweep").items():
        last = json.loads((run / "results.jsonl").read_text().splitlines()[-1])
        if algorithm == "ImportanceMask":
            assert {k: last["hparams"][k] for k in scaled} == scaled
            # the mean phase of the updates since the previous checkpoint: phase 2 was reached
            assert last["phase"] > 1 and "unimportant_rate" in last
        else:
            assert "phase1_steps" not in last["hparams"]


def test_dmg_jobs_train_with_the_demos_mask_lr_not_a_dataset_default(demo_run):
    """The demo's tuning is the demo's: its DMG jobs get mask_lr 1e-2 (as sweeps/demo.toml's),
    while DMG's default on RotatedDigits, as on every dataset, stays 1e-3."""
    from domainbed import hparams_registry

    from dmg_domainbed.demo import DEMO_HPARAMS
    from dmg_domainbed.sweep.config import load_sweep

    output, _ = demo_run
    rates = set()
    for (algorithm, _), run in runs_of(output / "sweep").items():
        last = json.loads((run / "results.jsonl").read_text().splitlines()[-1])
        if algorithm == "DMG":
            rates.add(last["hparams"]["mask_lr"])
    assert rates == {1e-2} == {DEMO_HPARAMS["DMG"]["mask_lr"]}
    assert hparams_registry.default_hparams("DMG", "RotatedDigits")["mask_lr"] == 1e-3
    toml = Path(__file__).resolve().parents[1] / "sweeps" / "demo.toml"
    assert load_sweep(toml).hparams_of("DMG") == DEMO_HPARAMS["DMG"]


def test_second_run_resumes_only_unfinished_jobs(demo_run, tmp_path):
    output = tmp_path / "moved_demo"
    shutil.copytree(demo_run[0], output)
    runs = runs_of(output / "sweep")
    interrupted = runs[("DMG", 2)]
    (interrupted / "done").unlink()
    others = {key: snapshot(run) for key, run in runs.items() if run != interrupted}

    code, printed, _ = cli_launching(*demo_args(output))
    assert code == 0

    assert f"{N_JOBS} jobs, {N_JOBS - 1} already done, 1 to run" in printed
    assert f"[{N_JOBS}/{N_JOBS}] done: DMG, test domain 60 of RotatedDigits" in printed
    assert (interrupted / "done").exists()
    assert {key: snapshot(runs[key]) for key in others} == others


@pytest.mark.slow  # a sweep of 32 new processes that train
def test_trials_and_hparam_samples_give_standard_errors_and_intervals(tmp_path):
    output = tmp_path / "demo"
    code, printed, _ = cli_launching(
        "demo",
        "--output_dir",
        str(output),
        "--steps",
        "5",
        "--algorithms",
        "ERM",
        "DMG",
        "--trials",
        "2",
        "--hparams_samples",
        "2",
    )
    assert code == 0

    assert "2 hparam setting(s) x 2 trial(s): 32 jobs" in printed
    seeds, hparams = set(), {}
    for folder in (output / "sweep").iterdir():
        if folder.is_dir():
            record = json.loads((folder / "results.jsonl").read_text().splitlines()[-1])
            args = record["args"]
            seeds.add((args["test_envs"][0], args["hparams_seed"], args["trial_seed"]))
            hparams.setdefault(args["hparams_seed"], set()).add(record["hparams"]["lr"])
    assert seeds == {(env, h, t) for env in range(4) for h in (0, 1) for t in (0, 1)}
    # hparams_seed 0 trains DomainBed's defaults; seed 1 a random draw
    assert hparams[0] == {1e-3} and hparams[1].isdisjoint(hparams[0])
    table = printed.split("model selection method: training-domain validation set")[1]
    erm_row = next(line for line in table.splitlines() if line.startswith("ERM"))
    errors = [float(error) for error in re.findall(r"\+/- ([0-9.]+)", erm_row)]
    assert len(errors) == 4 and any(error > 0 for error in errors), erm_row
    # DMG paired with ERM on the two trials' splits: the difference with its 95% interval.
    line = re.search(
        r"  DMG vs ERM: ([-+][0-9.]+) points, 95% CI \[(\S+), (\S+)\] over 2 trials", printed
    )
    assert line, printed
    difference, low, high = map(float, line.groups())
    assert low <= difference <= high
    comparisons = re.sub(" +", " ", (output / "report" / "comparisons.md").read_text())
    assert re.search(
        r"\| DMG( \| [-+][0-9.]+ \[[-+][0-9.]+, [-+][0-9.]+\]( better| worse)?){5} \|", comparisons
    )


def test_unknown_algorithm_is_refused_before_any_work(tmp_path):
    code, _, message = cli(
        "demo", "--output_dir", str(tmp_path / "d"), "--algorithms", "DMG", "NotAnAlgo"
    )
    assert code == 2
    assert "unknown algorithm(s) NotAnAlgo" in message and "ERM" in message
    assert not (tmp_path / "d").exists()


def test_a_folder_with_runs_of_another_configuration_is_refused(demo_run, tmp_path):
    # collect_results would select among the runs of both configurations.
    output = tmp_path / "demo"
    shutil.copytree(demo_run[0], output)
    before = snapshot(output)
    args = ["--steps", "5", "--trials", "1", "--algorithms", "DMG"]
    code, _, message = cli("demo", "--output_dir", str(output), *args)
    assert code == 2
    # the first conflicting run found, in the order of the folders' hashed names
    refused = r"already holds a run of DMG on test env \d that this demo does not plan"
    assert re.search(refused, message)
    assert f"steps={DEMO_STEPS}" in message and "Use another --output_dir" in message
    assert snapshot(output) == before
