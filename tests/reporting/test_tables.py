"""Table cells are formatted exactly as DomainBed's collect_results formats them."""

import pandas as pd
import pytest
from domainbed.scripts import collect_results

from dmg_domainbed.reporting.tables import cell_text, markdown_table, mean_and_error, wide_table


@pytest.mark.parametrize("accuracies", [[0.5], [0.9, 0.8], [0.123, 0.456, 0.789], [0.3] * 5])
def test_mean_and_error_as_collect_results(accuracies):
    expected_mean, expected_error, expected_text = collect_results.format_mean(accuracies, False)
    mean, error = mean_and_error(accuracies)
    assert (mean, error) == (expected_mean, expected_error)
    assert cell_text(mean, error) == expected_text


def test_empty_cell_is_collect_results_x():
    assert mean_and_error([]) is None
    assert cell_text(None, None) == collect_results.format_mean([], False)[2]


def test_markdown_table_escapes_pipes_and_leaves_missing_cells_empty():
    table = pd.DataFrame({"x": ["a|b", None], "y": [1.5, float("nan")]}, index=["r1", "r2"])
    assert markdown_table(table, "row") == (
        "| row | x | y |\n| --- | ---: | ---: |\n| r1 | a\\|b | 1.5 |\n| r2 |  |  |\n"
    )


def test_wide_table_keeps_the_order_algorithms_and_domains_came_in():
    long = pd.DataFrame(
        {
            "algorithm": ["ERM", "ERM", "DMG", "DMG"],
            "test_domain": ["90", "0", "90", "0"],
            "text": ["1", "2", "3", "4"],
        }
    )
    wide = wide_table(long)
    assert list(wide.index) == ["ERM", "DMG"] and list(wide.columns) == ["90", "0"]
    assert wide.loc["DMG", "0"] == "4"
