"""A long list told in a line: its first few items and how many more there are; and names
that read alike told apart.

Stdlib only, a leaf: every layer's messages use it, the launchers and ``algorithms`` too."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

# Items a message names before it counts the rest.
SHOWN = 5


def shortlist(
    items: Sequence[object], shown: int = SHOWN, separator: str = ", ", last: str = " and "
) -> str:
    """``a, b, c, d, e and 9,995 more`` for a list of 10,000; all of a short list. ``last``
    comes before the count (``"; and "``, or ``"\\n  and "`` for a list of lines)."""
    text = separator.join(str(item) for item in items[:shown])
    return text + (f"{last}{len(items) - shown:,} more" if len(items) > shown else "")


def how_they_differ(name: str, other: str) -> str:
    """What tells apart two different names that read alike (``'cat'`` and ``'cat '``; an
    ``é`` composed or decomposed, as macOS writes folder names), for a message that shows them
    with ``repr``; ``''`` when they read differently."""
    if name == other:
        return ""
    if name.strip() == other.strip():
        return "white space at an end"
    if unicodedata.normalize("NFC", name) == unicodedata.normalize("NFC", other):
        return "Unicode normal form (the same letters, one composed, one decomposed: NFC, NFD)"
    if name.casefold() == other.casefold():
        return "upper and lower case"
    return ""
