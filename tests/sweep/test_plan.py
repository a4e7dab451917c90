"""A sweep file expands to DomainBed's own job list, with the file's fixed hparams in every job."""

import json
import os
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

from domainbed import hparams_registry

from dmg_domainbed.algorithms.importance_mask.importance_mask import ImportanceMask
from dmg_domainbed.cli import main
from dmg_domainbed.sweep import plan
from dmg_domainbed.sweep.config import load_sweep, resolve
from dmg_domainbed.sweep.launcher_settings import launcher_environment

from ..helpers import domainbed_script

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
    sweep = resolve(
        load_sweep(SWEEPS / "pacs_resnet50.toml"), str(tmp_path / "data"), str(tmp_path / "sweep")
    )
    jobs = [job for group in plan.groups(sweep.config) for job in plan.jobs(sweep, group)]

    assert len(jobs) == 960  # 4 algorithms x 4 test domains x 20 hparams x 3 trials
    assert Counter(j.train_args["algorithm"] for j in jobs) == {
        "ERM": 240,  # the baseline the report pairs every algorithm with
        "Aggregate": 240,
        "MultiHead": 240,
        "DMG": 240,
    }
    assert {tuple(j.train_args["test_envs"]) for j in jobs} == {(0,), (1,), (2,), (3,)}
    assert {j.train_args["hparams_seed"] for j in jobs} == set(range(20))
    assert {j.train_args["trial_seed"] for j in jobs} == {0, 1, 2}
    assert {j.train_args["dataset"] for j in jobs} == {"PACS"}
    assert all("steps" not in j.train_args for j in jobs)  # DomainBed's own step budget
    assert len({j.output_dir for j in jobs}) == 960
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


def test_groups_share_one_folder(tmp_path):
    sweep = resolve(load_sweep(SWEEPS / "pacs_resnet50.toml"), "data", str(tmp_path))
    first, second = plan.groups(sweep.config)
    assert first.algorithms == ("ERM", "Aggregate", "MultiHead") and second.algorithms == ("DMG",)
    assert json.loads(second.hparams_json)["lambda_overlap"] == 0.1
    assert sweep.data_dir == str(Path("data").resolve())
    folders = {
        os.path.dirname(job.output_dir)
        for g in plan.groups(sweep.config)
        for job in plan.jobs(sweep, g)
    }
    assert folders == {str(tmp_path)}


def test_jobs_are_the_ones_domainbed_sweep_script_makes(tmp_path):
    config = load_sweep(SWEEPS / "demo.toml")
    sweep = resolve(config, ".", str(tmp_path / "sweep"))
    ours = {job.output_dir for job in plan.plan_sweep(sweep).jobs}  # no protocol: DomainBed's
    theirs = set()
    for group in plan.groups(config):  # one DomainBed sweep per set of fixed hparams (mask_lr)
        fixed = ["--hparams", group.hparams_json] if group.hparams_json else []
        printed = domainbed_script(
            "sweep",
            "delete_incomplete",
            "--datasets",
            *config.datasets,
            "--algorithms",
            *group.algorithms,
            *fixed,
            "--n_hparams",
            str(config.n_hparams),
            "--n_trials",
            str(config.n_trials),
            "--single_test_envs",
            "--data_dir",
            sweep.data_dir,
            "--output_dir",
            sweep.output_dir,
            "--command_launcher",
            "local",
            "--skip_confirmation",
        )
        theirs |= set(re.findall(r"Not launched: (\S+) ", printed))
    assert len(plan.groups(config)) == 2 and len(ours) == 96 and ours == theirs


SEARCH_ONCE_SWEEP = """[sweep]
algorithms = ["ERM"]
datasets = ["RotatedDigits"]
single_test_envs = true
{protocol}
"""


def test_search_once_plans_at_most_half_of_domainbed_s_jobs(tmp_path, capsys):
    # DomainBed's 20 hparams x 3 trials on RotatedDigits' 4 test domains: 240 jobs; search_once:
    # 20 x 1 on trial 0, then 1 x 2 (the winner on trials 1 and 2) per test domain: 88.
    default, once = (tmp_path / "default.toml", tmp_path / "once.toml")
    default.write_text(SEARCH_ONCE_SWEEP.format(protocol=""))
    once.write_text(SEARCH_ONCE_SWEEP.format(protocol='protocol = "search_once"'))
    full = plan.plan_sweep(resolve(load_sweep(default), ".", str(tmp_path / "out")))
    searched = plan.plan_sweep(resolve(load_sweep(once), ".", str(tmp_path / "out")))

    assert len(full.jobs) == 240
    stage_one = [job.train_args for job in searched.to_launch]
    assert len(stage_one) == 80 and len(searched.stage_one_unfinished) == 80
    # stage 1 is DomainBed's trial 0, every hparams seed, each job told its protocol
    for args in stage_one:
        args = {**args, "hparams": json.loads(args["hparams"])}
        assert args.pop("hparams") == {"protocol": "search_once"}
        assert args["trial_seed"] == 0

    # (its hparams, and so its folder's hash, differ by the protocol alone)
    def seeds(args):
        return {k: v for k, v in args.items() if k not in ("hparams", "output_dir")}

    trial_zero = [seeds(job.train_args) for job in full.jobs if job.train_args["trial_seed"] == 0]
    assert [seeds(args) for args in stage_one] == trial_zero
    # stage 2 waits for it: one stand-in per test domain and later trial, for the cost only
    stand_ins = Counter(
        (tuple(a["test_envs"]), a["trial_seed"]) for a in searched.stage_two_stand_ins
    )
    assert stand_ins == {((env,), trial): 1 for env in range(4) for trial in (1, 2)}
    assert len(searched.jobs) + len(stand_ins) == 88 <= len(full.jobs) // 2
    assert (
        "stage 2 (trials 1..2, each winner's hparams seed): 8 job(s), not launched while "
        "stage 1 is incomplete (80 of its jobs are not done)" in searched.summary()
    )

    assert (
        main(
            [
                "sweep",
                str(once),
                "--dry-run",
                "--data_dir",
                ".",
                "--output_dir",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    assert "total: 88 jobs;" in capsys.readouterr().out  # the cost counts both stages
    assert not (tmp_path / "out").exists()


def test_checkpoint_freq_and_sized_hparams_reach_every_job(tmp_path):
    config = replace(
        load_sweep(SWEEPS / "demo.toml"),
        algorithms=("DMG", "ImportanceMask"),
        steps=40,
        checkpoint_freq=10,
    )
    sweep = resolve(config, ".", str(tmp_path))
    by_algorithm = {g.algorithms: g for g in plan.groups(sweep.config)}
    assert set(by_algorithm) == {("DMG",), ("ImportanceMask",)}
    assert by_algorithm[("ImportanceMask",)].hparams == ImportanceMask.run_length_hparams(40)
    for group in plan.groups(sweep.config):
        for job in plan.jobs(sweep, group):
            assert job.train_args["checkpoint_freq"] == 10 and job.train_args["steps"] == 40
            assert "--checkpoint_freq 10" in job.command_str


def test_save_model_every_checkpoint_reaches_every_job_as_a_bare_switch(tmp_path):
    config = replace(load_sweep(SWEEPS / "demo.toml"), save_model_every_checkpoint=True)
    sweep = resolve(config, ".", str(tmp_path))
    plain = resolve(load_sweep(SWEEPS / "demo.toml"), ".", str(tmp_path))
    for group, plain_group in zip(
        plan.groups(sweep.config), plan.groups(plain.config), strict=True
    ):
        jobs, plain_jobs = plan.jobs(sweep, group), plan.jobs(plain, plain_group)
        for job, plain_job in zip(jobs, plain_jobs, strict=True):
            # train.py's store_true takes no value: the switch is followed by the next option
            assert re.search(r"--save_model_every_checkpoint +--seed ", job.command_str)
            assert "save_model_every_checkpoint" not in plain_job.command_str
            assert job.output_dir != plain_job.output_dir
    assert "every checkpoint's model saved" in plan.plan_sweep(sweep).summary()


def test_launcher_settings_of_the_file_become_variables_the_environment_wins(tmp_path):
    config = load_sweep(SWEEPS / "pacs_resnet50.toml")
    file_launcher, settings = config.launcher, config.launcher_options
    env, notes = launcher_environment(
        config.path, "submitit", {"DMG_SUBMITIT_TIME_MIN": "30"}, file_launcher, settings
    )
    assert env["DMG_SUBMITIT_GPUS"] == "1" and env["DMG_SUBMITIT_MEM_GB"] == "32"
    assert env["DMG_SUBMITIT_TIME_MIN"] == "30"
    assert notes == [
        "DMG_SUBMITIT_TIME_MIN=30 from the environment wins over time_min = 720 in the file"
    ]
    env, notes = launcher_environment(config.path, "local_parallel", {}, file_launcher, settings)
    assert "DMG_SUBMITIT_GPUS" not in env and "not used" in notes[0]


def test_the_plan_counts_the_jobs_in_each_state_their_folders_show(tmp_path):
    sweep = resolve(load_sweep(SWEEPS / "demo.toml"), ".", str(tmp_path))
    first, second, third, *_ = plan.plan_sweep(sweep).jobs
    for job in (first, second, third):
        Path(job.output_dir).mkdir()
    (Path(third.output_dir) / "done").write_text("")

    planned = plan.plan_sweep(sweep)

    assert (len(planned.to_launch), len(planned.incomplete), len(planned.done)) == (93, 2, 1)
    assert [job.output_dir for job in planned.incomplete] == [first.output_dir, second.output_dir]
    assert len(planned.unfinished) == 95
    assert third.output_dir not in [job.output_dir for job in planned.unfinished]
    assert planned.summary().startswith(
        f"Sweep {SWEEPS / 'demo.toml'}: 96 job(s): 93 to launch, 1 done, 2 incomplete"
    )
