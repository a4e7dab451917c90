"""Which run, hparams and step each selection method selects: DomainBed's own choice, with the
step it does not return."""

import itertools

import numpy as np
import pytest
from domainbed import model_selection
from domainbed.lib import reporting
from domainbed.lib.query import Q

from dmg_domainbed.reporting import tables

STEPS = (0, 10, 20)


def sweep_records(seed: int = 0) -> list[dict]:
    """Records of a Debug28 sweep (3 environments): 2 algorithms x 2 trials x 3 hparams
    settings, each holding out one domain and every pair of domains, random accuracies."""
    rng = np.random.default_rng(seed)
    records = []
    for algorithm, trial, hparams_seed in itertools.product(("ERM", "DMG"), (0, 1), (0, 1, 2)):
        hparams = {"lr": 10.0 ** -(hparams_seed + 2), "batch_size": 8 * (hparams_seed + 1)}
        for test_envs in ([0], [1], [2], [0, 1], [0, 2], [1, 2]):
            folder = f"{algorithm}_{trial}_{hparams_seed}_{'_'.join(map(str, test_envs))}"
            for step in STEPS:
                args = {
                    "algorithm": algorithm,
                    "dataset": "Debug28",
                    "test_envs": test_envs,
                    "hparams_seed": hparams_seed,
                    "trial_seed": trial,
                    "output_dir": folder,
                }
                accuracies = {
                    f"env{env}_{split}_acc": round(float(rng.uniform()), 2)
                    for env in range(3)
                    for split in ("in", "out")
                }
                records.append({"args": args, "hparams": hparams, "step": step, **accuracies})
    return records


@pytest.fixture(scope="module")
def ranked():
    return tables.ranked_runs(Q(sweep_records()))


def test_selected_accuracy_is_domainbeds_for_every_method_and_group(ranked):
    records = Q(sweep_records())
    chosen = tables.selected_frame(ranked)
    for method in (
        model_selection.IIDAccuracySelectionMethod,
        model_selection.LeaveOneOutSelectionMethod,
        model_selection.OracleSelectionMethod,
    ):
        rows = chosen[chosen["selection_method"] == method.name].set_index(
            ["algorithm", "test_env", "trial_seed"]
        )
        groups = reporting.get_grouped_records(records)
        assert len(rows) == len(groups) == 2 * 3 * 2
        for group in groups:
            key = (group["algorithm"], group["test_env"], group["trial_seed"])
            assert rows.loc[key, "accuracy"] == pytest.approx(
                100 * method.sweep_acc(group["records"])
            )


def test_step_hparams_and_run_are_those_of_the_chosen_checkpoint(ranked):
    by_folder = {}
    for record in sweep_records():
        by_folder.setdefault(record["args"]["output_dir"], []).append(record)
    chosen = tables.selected_frame(ranked)
    for _, row in chosen.iterrows():
        run = by_folder[row["run"]]
        assert run[0]["args"]["test_envs"] == [row["test_env"]]
        assert run[0]["args"]["hparams_seed"] == row["hparams_seed"]
        assert row["hparams"] == run[0]["hparams"]
        record = next(r for r in run if r["step"] == row["step"])
        assert 100 * record[f"env{row['test_env']}_in_acc"] == pytest.approx(row["accuracy"])
        if row["selection_method"] == model_selection.OracleSelectionMethod.name:
            assert row["step"] == STEPS[-1]  # the oracle never stops early
        if row["selection_method"] == model_selection.IIDAccuracySelectionMethod.name:
            # the checkpoint with the best mean validation accuracy of the source domains
            sources = [e for e in range(3) if e != row["test_env"]]
            validation = [np.mean([r[f"env{e}_out_acc"] for e in sources]) for r in run]
            assert record is run[int(np.argmax(validation))]


def test_ranks_order_every_hparams_setting_by_validation_accuracy(ranked):
    iid = ranked[ranked["selection_method"] == model_selection.IIDAccuracySelectionMethod.name]
    for _, group in iid.groupby(["algorithm", "test_env", "trial_seed"]):
        assert list(group["rank"]) == [0, 1, 2]
        assert group["val_acc"].is_monotonic_decreasing
        assert sorted(group["hparams_seed"]) == [0, 1, 2]


def test_selected_hparams_has_one_column_per_hparam(ranked):
    table = tables.selected_hparams(tables.selected_frame(ranked))
    assert {"lr", "batch_size", "hparams_seed", "step", "run"} <= set(table.columns)
    first = table.iloc[0]
    assert first["lr"] == 10.0 ** -(first["hparams_seed"] + 2)
