"""A long list in a message: its first few items, then how many more there are."""

import pytest

from dmg_domainbed.shortlist import shortlist

pytestmark = pytest.mark.no_domainbed


def test_a_long_list_names_its_first_items_and_counts_the_rest():
    assert shortlist(range(10_000)) == "0, 1, 2, 3, 4 and 9,995 more"
    assert shortlist(["a", "b", "c"], 2, "; ", "; and ") == "a; b; and 1 more"
    assert shortlist(["x", "y"], 1, "\n  ", "\n  and ") == "x\n  and 1 more"


def test_a_short_list_is_given_whole():
    assert shortlist(["a", "b", "c"], 3) == "a, b, c"
    assert shortlist([]) == ""
