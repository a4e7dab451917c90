"""A long list told in a line: its first few items and how many more there are."""

from __future__ import annotations

from collections.abc import Sequence

# Items a message names before it counts the rest.
SHOWN = 5


def shortlist(items: Sequence[object], shown: int = SHOWN, separator: str = ", ") -> str:
    """``a, b, c, d, e and 9,995 more`` for a list of 10,000; all of a short list."""
    text = separator.join(str(item) for item in items[:shown])
    return text + (f" and {len(items) - shown:,} more" if len(items) > shown else "")
