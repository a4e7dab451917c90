"""Output folders of the commands that read runs (``report``, ``evaluate``, ``select``,
``masks``, the demo's report): checked before any work, and written so that nothing a user put
there is overwritten.

Such a folder is new, empty, or holds only the package's outputs: the files its :data:`RECORD`
names, which lists every file the package moved there. Anything else (a user's ``results.md``
or notes, a link, a folder) stops the command, naming it, before any work and again before
anything is moved. A command writes its files through :func:`staged`: into a hidden staging
folder inside the output folder, then, once every file is written, moved into place
(``os.replace``).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from dmg_domainbed.errors import UserError
from dmg_domainbed.folders import check_creatable, check_outside
from dmg_domainbed.shortlist import shortlist

RECORD = ".dmg-domainbed-outputs.json"
STAGING_PREFIX = ".dmg-domainbed-staging-"
NAMED = 5  # files named in a refusal; more are counted


def check_output_dir(output_dir: Path, *inputs: Path, only_outputs: bool = True) -> Path:
    """``output_dir``, unless it lies inside a folder the command reads, cannot be created,
    holds a file this user may not overwrite, or (``only_outputs``) holds anything but the
    package's outputs (:func:`refuse_others`)."""
    check_creatable(output_dir, "--output_dir")
    check_outside(output_dir, inputs, "output folder", "input", "an --output_dir")
    if output_dir.is_dir():
        for path in output_dir.iterdir():
            if path.is_file() and not os.access(path, os.W_OK):
                raise UserError(
                    f"--output_dir '{output_dir}' holds '{path.name}', which this user may not "
                    "overwrite. Give another folder, or make that file writable."
                )
    if only_outputs:
        refuse_others(output_dir)
    return output_dir


def recorded(folder: Path) -> set[str]:
    """The names of the files the package wrote into ``folder`` (none without a readable
    record; an earlier version's record maps them to their SHA-256)."""
    try:
        return set(json.loads((folder / RECORD).read_text())["files"])
    except (OSError, ValueError, TypeError, KeyError):
        return set()


def refuse_others(folder: Path) -> None:
    """:class:`UserError` naming what ``folder`` holds besides the package's outputs."""
    own = recorded(folder) | {RECORD}
    found = sorted(
        path.name
        for path in (folder.iterdir() if folder.is_dir() else ())
        if not path.name.startswith(STAGING_PREFIX)
        and (path.name not in own or path.is_symlink() or not path.is_file())
    )
    if found:
        raise UserError(
            f"'{folder}' holds {shortlist(found, NAMED)}, which dmg-domainbed did not write "
            f"there (it lists what it writes in {RECORD}); it writes only into a new or empty "
            "folder or one holding only its own outputs. Nothing was written. Give another "
            "output folder, or move those away."
        )


@contextlib.contextmanager
def staged(folder: Path) -> Iterator[Path]:
    """A new, empty staging folder to write ``folder``'s files into. When the block ends
    without an error, its files replace those of the same names in ``folder`` (which must
    still hold only the package's outputs: else :class:`UserError` and nothing moved) and are
    recorded; the staging folder is removed in any case, and on an error so are the folders
    made for it."""
    made = [path for path in (folder, *folder.absolute().parents) if not path.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix=STAGING_PREFIX, dir=folder) as staging:
            stage = Path(staging)
            yield stage
            refuse_others(folder)
            written = sorted(stage.iterdir())
            names = recorded(folder) | {path.name for path in written}
            (stage / RECORD).write_text(json.dumps({"files": sorted(names)}, indent=1) + "\n")
            for path in [stage / RECORD, *written]:  # the record first: it may name one too many
                os.replace(path, folder / path.name)
    except BaseException:
        for path in made:  # deepest first; only those still empty
            with contextlib.suppress(OSError):
                path.rmdir()
        raise


def placed(files: Iterable[Path], folder: Path) -> list[Path]:
    """Where ``files``, written into a staging folder, lie in ``folder`` once moved."""
    return [folder / path.name for path in files]
