"""The sweep's checks: a sweep too large to plan is refused before DomainBed makes its jobs."""

import pytest
from domainbed import datasets
from domainbed.scripts.sweep import make_args_list

from dmg_domainbed.errors import UserError
from dmg_domainbed.sweep.checks import MAX_JOBS, check_against_domainbed, job_count
from dmg_domainbed.sweep.config import SweepConfig


def config(**keys) -> SweepConfig:
    return SweepConfig("s.toml", ("ERM", "DMG"), ("RotatedDigits",), **keys)


@pytest.mark.parametrize("single_test_envs", [False, True])
def test_the_job_count_is_that_of_domainbed_s_job_list(single_test_envs):
    small = config(n_hparams=3, n_hparams_from=1, n_trials=2, single_test_envs=single_test_envs)
    made = make_args_list(
        n_trials=2,
        dataset_names=["RotatedDigits"],
        algorithms=["ERM", "DMG"],
        n_hparams_from=1,
        n_hparams=3,
        steps=None,
        data_dir=".",
        task="domain_generalization",
        holdout_fraction=0.2,
        single_test_envs=single_test_envs,
        hparams=None,
    )
    assert job_count(small, [datasets.num_environments("RotatedDigits")]) == len(made)


def test_a_sweep_of_too_many_jobs_is_refused_with_its_count_and_the_fix():
    # Each key within its bounds, together 1000 x 100 x 2 algorithms x 21 test domains.
    huge = config(n_hparams=1000, n_trials=100)
    jobs = job_count(huge, [datasets.num_environments("RotatedDigits")])
    assert jobs > MAX_JOBS
    with pytest.raises(
        UserError,
        match=rf"has {jobs:,} jobs, more than the {MAX_JOBS:,} .*"
        "lower n_hparams or n_trials, or run it in parts with n_hparams_from",
    ):
        check_against_domainbed(huge)
