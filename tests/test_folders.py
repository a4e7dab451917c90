"""An output folder that cannot be created is a clear error naming the file in the way; a
record's field never becomes more than one plain name in a path."""

import pytest

from dmg_domainbed.errors import UserError
from dmg_domainbed.folders import check_creatable, path_part

from .helpers import read_only

pytestmark = pytest.mark.no_domainbed


def test_free_paths_and_existing_folders_are_fine(tmp_path):
    assert check_creatable(tmp_path, "--output_dir") == tmp_path
    assert check_creatable(tmp_path / "a" / "b", "--output_dir") == tmp_path / "a" / "b"


def test_a_file_at_or_above_the_folder_is_named(tmp_path):
    blocker = tmp_path / "notes.txt"
    blocker.write_text("")
    with pytest.raises(UserError, match=r"--output_dir '.*notes.txt' is a file"):
        check_creatable(blocker, "--output_dir")
    with pytest.raises(UserError, match=rf"lies under '{blocker}', which is a file"):
        check_creatable(blocker / "report" / "x", "--output_dir")


def test_a_folder_this_user_cannot_write_is_named(tmp_path):
    with read_only(tmp_path / "results") as folder:
        with pytest.raises(UserError, match=r"--output_dir '.*results' is not writable"):
            check_creatable(folder, "--output_dir")
        with pytest.raises(UserError, match=r"'.*results/report' cannot be made in '.*results'"):
            check_creatable(folder / "report", "--output_dir")


def test_a_records_field_becomes_one_plain_name_never_a_path():

    crafted = ["../../../x", "..", ".", "", ".hidden", "a/b", "%2E", "x" * 300, "C:\\x"]
    names = [path_part(value) for value in crafted]
    assert len(set(names)) == len(names)  # distinct values stay distinct
    for name in names:
        assert "/" not in name and "\\" not in name and not name.startswith(".")
        assert 0 < len(name) <= 100
    assert [path_part(v) for v in ("DMG", "ERM (bf16)", "RotatedDigits", 3)] == [
        "DMG",
        "ERM (bf16)",
        "RotatedDigits",
        "3",
    ]
