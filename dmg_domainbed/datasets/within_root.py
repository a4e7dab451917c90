"""Which paths belong to a dataset's root: no fix the package suggests touches anything else.

A dataset is what its root folder holds, links followed, so a class folder may be a link to shared
storage. Removing or renaming a path changes the folder that holds its entry: through such a link,
``rm root/north/cat/1.png`` deletes the shared original. A command is therefore given only for a
path whose entry lies in a folder that resolves inside the root (:func:`changed_outside`); the
others are named, without a command (:func:`outside_note`). A manifest's CSV may not name a path
outside its root at all (:func:`leaves_root`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from dmg_domainbed.shortlist import shortlist


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def leaves_root(relative: str, root: Path) -> bool:
    """Whether ``relative``, a path given relative to ``root``, names a place outside it by its
    text: climbing out with ``..``, or absolute."""
    return not _inside(os.path.normpath(os.path.join(root, relative)), os.path.normpath(root))


def changed_outside(path: str | Path, root: Path) -> bool:
    """Whether removing or renaming ``path`` changes a folder outside ``root``: the folder that
    holds its entry resolves, links followed, outside the root."""
    return not _inside(os.path.realpath(os.path.dirname(path)), os.path.realpath(root))


def outside_note(paths: Sequence[str | Path], root: Path) -> str:
    """What a fix says of ``paths`` (:func:`changed_outside`) instead of a command."""
    return (
        f"{shortlist(list(paths))} lie(s) outside {root}, reached through a link: no command is "
        "given for them; change them where they lie only if that copy is yours, or take the "
        f"link out of {root}"
    )
