"""Figures are drawn without a display and written as PNG files."""

import pytest

from dmg_domainbed.drawing import colours, figure, save

pytestmark = pytest.mark.no_domainbed


def test_a_figure_is_saved_as_png(tmp_path):
    fig = figure(2, 1)
    fig.add_subplot().plot([0, 1], [1, 0])
    assert save(fig, tmp_path / "f.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_colours_are_distinct_and_follow_the_order_of_the_names():
    first = colours(["a", "b", "c"])
    assert len(set(first.values())) == 3
    assert colours(["a", "b"]) == {"a": first["a"], "b": first["b"]}
