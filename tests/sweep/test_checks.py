"""The sweep's checks: a sweep too large to plan is refused before DomainBed makes its jobs."""

import pytest
from domainbed.scripts.sweep import make_args_list

from dmg_domainbed.datasets.check.data_check import check_dataset
from dmg_domainbed.errors import UserError
from dmg_domainbed.hparams.of_job import job_hparams
from dmg_domainbed.sweep.checks import MAX_JOBS, check_file
from dmg_domainbed.sweep.config import SweepConfig, load_sweep, resolve
from dmg_domainbed.sweep.plan import job_count

from ..datasets.conftest import write_domains
from ..helpers import fresh_domainbed, machine_check, register_manifests


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
    assert job_count(small) == len(made)


def test_a_sweep_of_too_many_jobs_is_refused_with_its_count_and_the_fix():
    # Each key within its bounds, together 1000 x 100 x 2 algorithms x 21 test domains.
    huge = config(n_hparams=1000, n_trials=100)
    jobs = job_count(huge)
    assert jobs > MAX_JOBS
    with pytest.raises(
        UserError,
        match=rf"has {jobs:,} jobs, more than the {MAX_JOBS:,} .*"
        "lower n_hparams or n_trials, or run it in parts with n_hparams_from",
    ):
        check_file(huge)


PLUGIN = '''
import torch
from dmg_domainbed.algorithms.base import PluginAlgorithm, featurizer_classifier, pooled
from dmg_domainbed.hparams import HParam, HParamSpace


class Smoothed(PluginAlgorithm):
    """Its random search draws smoothing in [0.6, 1], where it trains only with [0, 0.5]."""

    HPARAMS = HParamSpace(
        HParam("smoothing", 0.1, lambda r: float(r.uniform(0.6, 1.0)), minimum=0.0, maximum=0.5)
    )

    def __init__(self, input_shape, num_classes, num_domains, hparams):
        super().__init__(input_shape, num_classes, num_domains, hparams)
        self.network = featurizer_classifier(input_shape, num_classes, hparams)

    def update(self, minibatches, unlabeled=None):
        x, y = pooled(minibatches)
        loss = torch.nn.functional.cross_entropy(self.network(x), y, label_smoothing=0.1)
        return {"loss": loss.item()}

    def predict(self, x):
        return self.network(x)
'''


def test_jobs_whose_drawn_hparams_their_algorithm_refuses_stop_the_sweep_before_any_folder(
    tmp_path,
):
    info = tmp_path / "smoothed_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: smoothed-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[domainbed.algorithms]\nSmoothed = smoothed_plugin:Smoothed\n"
    )
    (tmp_path / "smoothed_plugin.py").write_text(PLUGIN)
    sweep_file, out = tmp_path / "s.toml", tmp_path / "out"
    sweep_file.write_text(
        '[sweep]\nalgorithms = ["Smoothed"]\ndatasets = ["RotatedDigits"]\n'
        "n_hparams = 3\nn_trials = 1\nsingle_test_envs = true\n"
    )
    with fresh_domainbed(tmp_path):
        from dmg_domainbed.errors import UserError
        from dmg_domainbed.hparams.of_job import job_hparams
        from dmg_domainbed.sweep.run import SweepRequest, run_sweep

        drawn = [job_hparams("Smoothed", "RotatedDigits", s, 0)["smoothing"] for s in (1, 2)]
        assert all(value > 0.5 for value in drawn)  # both draws refused: 8 of the 12 jobs
        request = SweepRequest(sweep_file, str(tmp_path), str(out), "local", dry_run=True)
        with pytest.raises(UserError) as refused:
            run_sweep(request, echo=lambda line: None)
    message = str(refused.value)
    assert message.startswith(f"{sweep_file}: 8 of the sweep's 12 jobs would stop at their start")
    assert (
        "Smoothed on RotatedDigits, hparams_seed 1, trial_seed 0 (4 jobs, one per choice of "
        f"test domains): Smoothed hparam 'smoothing' = {drawn[0]!r} is not valid: it must be a "
        "number between 0 and 0.5\n"
    ) in message
    assert "hparams_seed 2, trial_seed 0" in message and " more\n" not in message
    assert "[sweep.algorithm_hparams.NAME]" in message
    assert not out.exists()


def test_a_dataset_s_files_are_checked_once_for_every_algorithm_of_the_sweep(tmp_path, monkeypatch):
    """Six algorithms on one dataset: its files are read once, for the largest batch of any of
    their jobs, not once per algorithm."""
    from dmg_domainbed.preflight import data

    write_domains(tmp_path / "images", per_class=40)  # 64 to train on a domain: any batch drawn
    manifest = tmp_path / "mine.toml"
    manifest.write_text('name = "Mine"\nroot = "images"\ninput_size = 28\n')
    register_manifests(monkeypatch, manifest)
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text(
        '[sweep]\nalgorithms = ["ERM", "Aggregate", "MultiHead", "DMG", "CorGrad", '
        '"ImportanceMask"]\ndatasets = ["Mine"]\nn_hparams = 2\nn_trials = 1\n'
        "single_test_envs = true\n"
    )
    checked = []

    def counted(dataset, *args, **kwargs):
        checked.append((dataset, kwargs["batch"].size))
        return check_dataset(dataset, *args, **kwargs)

    monkeypatch.setattr(data, "check_dataset", counted)
    sweep = resolve(load_sweep(sweep_file), str(tmp_path), str(tmp_path / "sweep"))
    assert machine_check(sweep).startswith("local")
    largest = max(
        job_hparams(a, "Mine", seed, 0)["batch_size"]
        for a in sweep.config.algorithms
        for seed in (0, 1)
    )
    assert checked == [("Mine", largest)]
