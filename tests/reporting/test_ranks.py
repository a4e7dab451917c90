"""Ranks across tasks: average ranks, and the Friedman test with its critical-difference
diagram only where there are enough tasks for it to mean something."""

import numpy as np
import pandas as pd
import pytest

from dmg_domainbed.drawing import save
from dmg_domainbed.reporting import ranks

pytestmark = pytest.mark.no_domainbed

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def selected(means: dict[str, float], n_datasets: int, n_domains: int, seed: int = 0):
    """Selected accuracies (3 trials) of algorithms with the given mean accuracy on
    ``n_datasets`` x ``n_domains`` tasks; task difficulty varies, noise 1 point."""
    rng = np.random.default_rng(seed)
    rows = []
    for dataset in range(n_datasets):
        for env in range(n_domains):
            difficulty = rng.normal(0, 10)
            for trial in range(3):
                for algorithm, mean in means.items():
                    accuracy = 60 + difficulty + mean + rng.normal(0, 1)
                    rows.append(["m", f"D{dataset}", algorithm, env, str(env), trial, accuracy])
    columns = ["selection_method", "dataset", "algorithm", "test_env", "test_domain"]
    return pd.DataFrame(rows, columns=[*columns, "trial_seed", "accuracy"])


def test_clear_order_gives_its_ranks_a_significant_friedman_test_and_a_diagram(tmp_path):
    frame = selected({"ERM": 0, "DMG": 5, "MultiHead": -5, "Aggregate": 0.2}, 3, 4)
    (ranking,) = ranks.rankings(frame, ["ERM", "Aggregate", "MultiHead", "DMG"])
    assert len(ranking.scores) == 12 and ranking.left_out_tasks == 0
    assert ranking.average_ranks["DMG"] == 1 and ranking.average_ranks["MultiHead"] == 4
    assert ranking.tested and ranking.p_value < 1e-3
    # DMG and MultiHead are 3 ranks apart: more than Nemenyi's critical difference.
    assert ranking.critical_difference < 3 and ranking.nemenyi.loc["DMG", "MultiHead"] < 0.05
    assert "the ranks differ at the 5% level" in ranks.summary(ranking)
    table = ranks.ranks_frame([ranking])
    assert list(table["algorithm"]) == ["DMG", "Aggregate", "ERM", "MultiHead"]
    assert (table["friedman_p"] == ranking.p_value).all()
    path = save(ranks.ranks_figure([ranking]), tmp_path / "ranks.png")
    assert path.read_bytes().startswith(PNG_SIGNATURE)


def test_few_tasks_give_ranks_but_no_test_and_say_why():
    frame = selected({"ERM": 0, "DMG": 1, "MultiHead": -5}, 1, 4)
    (ranking,) = ranks.rankings(frame)
    assert not ranking.tested and ranks.ranks_figure([ranking]) is None
    assert ranking.average_ranks.index[-1] == "MultiHead"
    line = ranks.summary(ranking)
    assert line.startswith("4 task(s) (dataset x test domain).")
    assert f"needs {ranks.MIN_TASKS} or more tasks" in line
    assert "Friedman test and critical-difference diagram left out" in ranks.ranks_markdown(
        [ranking]
    )


def test_two_algorithms_are_ranked_without_a_friedman_test():
    (ranking,) = ranks.rankings(selected({"ERM": 0, "DMG": 1}, 3, 4))
    assert not ranking.tested and "3 or more algorithms" in ranking.note


def test_tasks_without_every_algorithm_are_left_out_and_counted():
    frame = selected({"ERM": 0, "DMG": 1, "MultiHead": -5}, 3, 4)
    frame = frame[~((frame["algorithm"] == "DMG") & (frame["dataset"] == "D2"))]
    (ranking,) = ranks.rankings(frame)
    assert len(ranking.scores) == 8 and ranking.left_out_tasks == 4
    assert "(4 left out: not every algorithm has a result)" in ranks.summary(ranking)


def test_friedman_test_seldom_rejects_algorithms_that_do_not_differ():
    rng = np.random.default_rng(0)
    rejected = 0
    draws = 400
    for _ in range(draws):
        scores = pd.DataFrame(
            rng.normal(0, 1, size=(ranks.MIN_TASKS, 4))
            + rng.normal(0, 10, size=(ranks.MIN_TASKS, 1)),
            columns=["A", "B", "C", "D"],
        )
        ranking = ranks.rank("m", scores)
        rejected += ranking.p_value < ranks.ALPHA
    # About 5% or fewer (the chi-square approximation is conservative for few tasks), but
    # not never: the test does reject.
    assert 0 < rejected / draws < 0.07
