"""A sweep file expands to DomainBed's own job list, with the file's fixed hparams in every job."""

import json
from collections import Counter
from pathlib import Path

from domainbed import hparams_registry

from dmg_domainbed.sweep import plan
from dmg_domainbed.sweep.config import load_sweep
from dmg_domainbed.sweep.run import launcher_environment

SWEEPS = Path(__file__).parents[2] / "sweeps"
PAPER_MASK_LAYERS = ["featurizer.network.layer3", "featurizer.network.layer4", "classifier"]


def effective(job):
    """The hparams train.py will use for this job: random search, then --hparams."""
    args = job.train_args
    hparams = hparams_registry.random_hparams(
        args["algorithm"], args["dataset"], args["hparams_seed"]
    )
    hparams.update(json.loads(args["hparams"]))
    return hparams


def test_pacs_resnet50_expands_to_the_paper_s_comparison(tmp_path):
    sweep = plan.resolve(
        load_sweep(SWEEPS / "pacs_resnet50.toml"), str(tmp_path / "data"), str(tmp_path / "sweep")
    )
    jobs = [job for group in sweep.groups for job in plan.jobs(sweep, group)]

    assert len(jobs) == 720  # 3 algorithms x 4 test domains x 20 hparams x 3 trials
    assert Counter(j.train_args["algorithm"] for j in jobs) == {
        "Aggregate": 240,
        "MultiHead": 240,
        "DMG": 240,
    }
    assert {tuple(j.train_args["test_envs"]) for j in jobs} == {(0,), (1,), (2,), (3,)}
    assert {j.train_args["hparams_seed"] for j in jobs} == set(range(20))
    assert {j.train_args["trial_seed"] for j in jobs} == {0, 1, 2}
    assert {j.train_args["dataset"] for j in jobs} == {"PACS"}
    assert all("steps" not in j.train_args for j in jobs)  # DomainBed's own step budget
    assert len({j.output_dir for j in jobs}) == 720
    assert not (tmp_path / "sweep").exists()

    for job in jobs:
        hparams = effective(job)
        assert hparams["resnet18"] is False and hparams["resnet50_augmix"] is False
        if job.train_args["algorithm"] == "DMG":
            assert hparams["mask_layers"] == PAPER_MASK_LAYERS
            assert (hparams["lambda_overlap"], hparams["lambda_sparsity"]) == (0.1, 0.0)
            assert hparams["mask_init"] == "random_uniform"
        else:
            assert "lambda_overlap" not in hparams
    dmg_lrs = {effective(j)["mask_lr"] for j in jobs if j.train_args["algorithm"] == "DMG"}
    assert len(dmg_lrs) == 20  # mask_lr stays in the random search


def test_resnet18_files_switch_augmix_off_too():
    for name in ("pacs_resnet18", "domainnet_resnet18"):
        assert load_sweep(SWEEPS / f"{name}.toml").hparams == {
            "resnet18": True,
            "resnet50_augmix": False,
        }


def test_groups_become_domainbed_sweep_calls_into_one_folder(tmp_path):
    sweep = plan.resolve(load_sweep(SWEEPS / "pacs_resnet50.toml"), "data", str(tmp_path))
    first, second = (
        plan.domainbed_sweep_args(sweep, g, "launch", "submitit") for g in sweep.groups
    )
    assert first[first.index("--algorithms") + 1 : first.index("--n_hparams_from")] == [
        "Aggregate",
        "MultiHead",
    ]
    assert json.loads(second[second.index("--hparams") + 1])["lambda_overlap"] == 0.1
    assert first[first.index("--output_dir") + 1] == second[second.index("--output_dir") + 1]
    assert sweep.data_dir == str(Path("data").resolve())


def test_launcher_settings_of_the_file_become_variables_the_environment_wins(tmp_path):
    config = load_sweep(SWEEPS / "pacs_resnet50.toml")
    env, notes = launcher_environment(config, "submitit", {"DMG_SUBMITIT_TIME_MIN": "30"})
    assert env["DMG_SUBMITIT_GPUS"] == "1" and env["DMG_SUBMITIT_MEM_GB"] == "32"
    assert env["DMG_SUBMITIT_TIME_MIN"] == "30"
    assert notes == [
        "DMG_SUBMITIT_TIME_MIN=30 from the environment wins over time_min = 720 in the file"
    ]
    env, notes = launcher_environment(config, "local_parallel", {})
    assert "DMG_SUBMITIT_GPUS" not in env and "not used" in notes[0]


def test_delete_incomplete_runs_domainbed_s_own_command_before_launch(tmp_path, monkeypatch):
    from domainbed.scripts.sweep import Job

    from dmg_domainbed.sweep import run

    sweep = plan.resolve(load_sweep(SWEEPS / "demo.toml"), "data", str(tmp_path))
    group = sweep.groups[0]
    jobs = plan.jobs(sweep, group)
    for job in jobs[:2]:
        job.state = Job.INCOMPLETE
    for job in jobs[2:]:
        job.state = Job.DONE
    calls = []
    monkeypatch.setattr(run.subprocess, "call", lambda args, env: calls.append(args[3]) or 0)
    assert run.execute(sweep, [(group, jobs)], "local", {}, False, say=lambda _: None) == 0
    assert calls == []  # incomplete jobs are left alone; nothing else to launch
    assert run.execute(sweep, [(group, jobs)], "local", {}, True, say=lambda _: None) == 0
    assert calls == ["delete_incomplete", "launch"]
