"""Output folders of the commands that read runs: new, empty, or holding only the files the
package moved there (listed in :data:`RECORD`); anything else stops the command before any
work and again before anything is moved. Files are written into a hidden staging folder
(:func:`staged`), then moved into place.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from dmg_domainbed.errors import UserError
from dmg_domainbed.folders import check_creatable, check_outside
from dmg_domainbed.shortlist import shortlist

RECORD = ".dmg-domainbed-outputs.json"
STAGING_PREFIX = ".dmg-domainbed-staging-"
NAMED = 5  # files named in a refusal; more are counted


def check_output_dir(output_dir: Path, *inputs: Path, only_outputs: bool = True) -> Path:
    """``output_dir``, unless it lies inside an input, cannot be created, holds a file this user
    may not overwrite, or (``only_outputs``) anything but the package's outputs."""
    check_creatable(output_dir, "--output_dir")
    check_outside(output_dir, inputs, "output folder", "input", "an --output_dir")
    for path in output_dir.iterdir() if output_dir.is_dir() else ():
        if path.is_file() and not os.access(path, os.W_OK):
            raise UserError(
                f"--output_dir '{output_dir}' holds '{path.name}', which this user may not "
                "overwrite. Give another folder, or make that file writable."
            )
    if only_outputs:
        refuse_others(output_dir)
    return output_dir


def recorded(folder: Path) -> set[str]:
    """The names of the files the package wrote into ``folder`` (its readable record's)."""
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
    """A staging folder for ``folder``'s files, moved into it and recorded when the block ends
    without an error (if it still holds only the package's outputs); the folders made for it
    are removed on an error."""
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


def write_files(folder: Path, contents: Mapping[str, object]) -> list[Path]:
    """Each file of ``contents`` (name -> text, a table written as CSV without its index, or a
    function that writes the path it is given) written into ``folder`` through :func:`staged`;
    where they lie once moved."""
    with staged(folder) as stage:
        for name, content in contents.items():
            if isinstance(content, str):
                (stage / name).write_text(content)
            elif callable(content):
                content(stage / name)
            else:
                content.to_csv(stage / name, index=False)
    return [folder / name for name in contents]
