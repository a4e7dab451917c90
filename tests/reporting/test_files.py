"""Report files: CSV and Markdown tables, never inside a folder that is read."""

import re

import pandas as pd
import pytest

from dmg_domainbed.errors import UserError
from dmg_domainbed.reporting.outputs import check_output_dir, write_files
from dmg_domainbed.reporting.tables import sections_markdown


def test_an_output_folder_inside_an_input_folder_is_refused(tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    assert check_output_dir(tmp_path / "report", sweep) == tmp_path / "report"
    for inside in (sweep, sweep / "report", sweep / "a" / "b"):
        with pytest.raises(UserError, match="lies inside the input folder"):
            check_output_dir(inside, sweep)


def test_a_table_is_written_as_long_csv_and_titled_markdown(tmp_path):
    long = pd.DataFrame({"prediction": ["a", "b"], "accuracy": [50.0, 75.5]})
    wide = long.set_index("prediction")
    markdown = sections_markdown([("## First", wide), ("## Second", wide)], "Prediction")
    paths = write_files(tmp_path / "o", {"t.csv": long, "t.md": markdown})
    assert [p.name for p in paths] == ["t.csv", "t.md"]
    assert pd.read_csv(paths[0]).equals(long)
    markdown = re.sub(" +", " ", paths[1].read_text())
    assert markdown.count("| Prediction | accuracy |") == 2
    assert "## First" in markdown and "| b | 75.5 |" in markdown
