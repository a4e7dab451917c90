"""Table cells are formatted exactly as DomainBed's collect_results formats them, but for a cell
of one trial, which has no interval (collect_results prints +/- 0.0)."""

import re

import pandas as pd
import pytest
from domainbed.model_selection import LeaveOneOutSelectionMethod
from domainbed.scripts import collect_results

from dmg_domainbed.reporting.tables import (
    cell_text,
    cells_frame,
    markdown_table,
    markdown_text,
    results_markdown,
    wide_table,
)

LOO = LeaveOneOutSelectionMethod.name


@pytest.mark.parametrize("accuracies", [[0.5], [0.9, 0.8], [0.123, 0.456, 0.789], [0.3] * 5])
def test_a_cell_is_collect_results_own(accuracies):
    expected_mean, expected_error, expected_text = collect_results.format_mean(accuracies, False)
    frame = pd.DataFrame({"algorithm": "ERM", "test_env": 0, "test_acc": accuracies})
    cell = cells_frame(frame, ["algorithm", "test_env"], [("ERM", 0)]).iloc[0]
    assert cell["accuracy"] == expected_mean
    if len(accuracies) > 1:  # one trial: no interval, below
        assert (cell["stderr"], cell["text"]) == (expected_error, expected_text)


def test_empty_cell_is_collect_results_x():
    assert cell_text(None, None) == collect_results.format_mean([], False)[2]


def test_markdown_table_escapes_pipes_and_leaves_missing_cells_empty():
    table = pd.DataFrame({"x": ["a|b", None], "y": [1.5, float("nan")]}, index=["r1", "r2"])
    assert markdown_table(table, "row").splitlines() == [
        "| row   | x    | y   |",
        "|:------|:-----|:----|",
        "| r1    | a\\|b | 1.5 |",
        "| r2    |      |     |",
    ]


CRAFTED = [
    "ERM\n| Fake | 100.0 |",  # a row of its own
    "a|b",
    "`code | cell`",
    "<!-- the rest of the file hidden",
    "[click](http://example.com)",
    "*bold* ~~struck~~ _emphasis_",
    "back\\slash &lt; tab\there",
]


def shown(markdown: str) -> str:
    """What a Markdown cell shows: a backslash before ASCII punctuation undone (CommonMark's
    escapes; before any other character it is a backslash)."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown)


@pytest.mark.parametrize("crafted", CRAFTED)
@pytest.mark.parametrize("where", ["cell", "row", "column"])
def test_no_value_adds_a_row_a_column_or_formatting_to_a_markdown_table(crafted, where):
    values = {"cell": "1.5", "row": "DMG", "column": "0", where: crafted}
    table = pd.DataFrame({values["column"]: [values["cell"]]}, index=[values["row"]])
    lines = markdown_table(table, "Algorithm").splitlines()
    assert len(lines) == 3  # header, rule, one row
    cells = [re.split(r"(?<!\\)\|", line)[1:-1] for line in lines]  # at unescaped pipes
    assert [len(row) for row in cells] == [2, 2, 2]
    text = {"column": cells[0][1], "row": cells[2][0], "cell": cells[2][1]}[where].strip()
    assert shown(text) == crafted.replace("\n", "\\n").replace("\t", "\\t")
    assert not re.search(r"(?<!\\)[`<*~]|(?<!\\)\]\(", text)


def test_brackets_and_word_underscores_stay_readable_in_markdown():
    assert markdown_text("+0.7 [-5.0, +6.5]") == "+0.7 [-5.0, +6.5]"
    assert markdown_text("DMG (lambda_overlap=0.1)") == "DMG (lambda_overlap=0.1)"


def test_wide_table_keeps_the_order_algorithms_and_domains_came_in():
    long = pd.DataFrame(
        {
            "algorithm": ["ERM", "ERM", "DMG", "DMG"],
            "test_domain": ["90", "0", "90", "0"],
            "text": ["1", "2", "3", "4"],
            "n_trials": [3, 3, 3, 3],
        }
    )
    wide = wide_table(long)
    assert list(wide.index) == ["ERM", "DMG"] and list(wide.columns) == ["90", "0"]
    assert wide.loc["DMG", "0"] == "4"


def test_a_cell_of_one_trial_shows_its_mean_and_says_one_trial_never_plus_minus_zero():
    mean, error, _ = collect_results.format_mean([0.5], False)
    assert (mean, error) == (50.0, 0.0)  # what collect_results computes and prints as +/- 0.0
    assert cell_text(mean, error, n_trials=1) == "50.0"
    assert cell_text(*collect_results.format_mean([0.5, 0.7], False)[:2], 2) == "60.0 +/- 7.1"
    accuracies = pd.DataFrame(
        {"algorithm": "ERM", "test_env": [0, 1, 1], "test_acc": [0.5, 0.6, 0.8]}
    )
    cells = cells_frame(accuracies, ["algorithm", "test_env"], [("ERM", 0), ("ERM", 1)])
    one, two = cells.iloc[0], cells.iloc[1]
    assert (one["text"], one["n_trials"], pd.isna(one["stderr"])) == ("50.0", 1, True)
    assert (two["text"], two["n_trials"]) == ("70.0 +/- 7.1", 2) and two["stderr"] > 7
    wide = wide_table(cells.assign(test_domain=cells["test_env"].astype(str)))
    assert wide.loc["ERM"].tolist() == ["50.0 (one trial)", "70.0 +/- 7.1", "60.0"]


def test_a_selection_method_without_any_result_is_one_line_not_a_table_of_x():
    rows = []
    for method, accuracy in (("training-domain validation set", 50.0), (LOO, None)):
        for algorithm in ("ERM", "DMG"):
            for env, domain in ((0, "0"), ("Avg", "Avg")):
                text = cell_text(accuracy, 0.0) if env != "Avg" else f"{accuracy}"
                text = "X" if accuracy is None else text
                rows.append([method, "D", algorithm, env, domain, accuracy, 0.0, 1, text])
    columns = ["selection_method", "dataset", "algorithm", "test_env", "test_domain"]
    results = pd.DataFrame(rows, columns=[*columns, "accuracy", "stderr", "n_trials", "text"])
    averages = results[results["test_env"] == "Avg"].assign(dataset="D")
    markdown = re.sub(" +", " ", results_markdown(results, averages))
    assert markdown.count("| Algorithm |") == 2  # the results and averages of one method
    assert f"## Model selection: {LOO}" not in markdown and "| X |" not in markdown
    assert (
        f"Model selection {LOO}: no result for any cell: it validates on runs that hold out "
        "two domains (the test domain and one validation domain), and this sweep has none. "
        "Sweep without --single_test_envs (sweep file: single_test_envs = false)"
    ) in markdown
