"""Output folders of the commands that read runs (``report``, ``evaluate``, ``select``,
``masks``, the demo's report): checked before any work, and written so that nothing a user put
there is overwritten.

A command writes a folder's files through :func:`staged`: into a hidden staging folder inside
it, then, once every file is written and none would replace a file that is not the package's
own, moved into place (``os.replace``). The package records what it wrote in the folder's
:data:`RECORD`: each file's name and the SHA-256 of its content. A file already there is the
package's own when the record lists it with that content; anything else of a name the command
writes (a user's ``results.md``, a report file edited since, a link, a folder, a file of a
version that kept no record) is the user's, and the command stops, naming it, with nothing
written.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from dmg_domainbed.errors import UserError
from dmg_domainbed.folders import check_creatable, check_outside
from dmg_domainbed.shortlist import shortlist

RECORD = ".dmg-domainbed-outputs.json"
STAGING_PREFIX = ".dmg-domainbed-staging-"
NAMED = 5  # files named in a refusal; more are counted


def check_output_dir(output_dir: Path, *inputs: Path, writes: Iterable[str] = ()) -> Path:
    """``output_dir``, unless it lies inside a folder the command reads, cannot be created,
    holds a file this user may not overwrite, or holds a file of one of the names ``writes``
    (those the command surely writes) that is not the package's own (:func:`refuse_overwriting`)."""
    check_creatable(output_dir, "--output_dir")
    check_outside(output_dir, inputs, "output folder", "input", "an --output_dir")
    if output_dir.is_dir():
        for path in output_dir.iterdir():
            if path.is_file() and not os.access(path, os.W_OK):
                raise UserError(
                    f"--output_dir '{output_dir}' holds '{path.name}', which this user may not "
                    "overwrite. Give another folder, or make that file writable."
                )
    refuse_overwriting(output_dir, writes)
    return output_dir


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def recorded(folder: Path) -> dict[str, str]:
    """Name -> SHA-256 of every file the package wrote into ``folder`` (empty without a
    readable record)."""
    try:
        found = json.loads((folder / RECORD).read_text())
    except (OSError, ValueError):
        return {}
    files = found.get("files") if isinstance(found, dict) else None
    return {k: v for k, v in files.items() if isinstance(v, str)} if isinstance(files, dict) else {}


def not_own(folder: Path, names: Iterable[str]) -> list[str]:
    """Those of ``names`` that exist in ``folder`` and are not files the package wrote there,
    unchanged since."""
    own = recorded(folder)
    found = []
    for name in sorted(set(names)):
        path = folder / name
        if not (path.exists() or path.is_symlink()):
            continue
        if path.is_symlink() or not path.is_file() or own.get(name) != _digest(path):
            found.append(name)
    return found


def refuse_overwriting(folder: Path, names: Iterable[str]) -> None:
    """:class:`UserError` naming the files of ``names`` in ``folder`` that the package did not
    write there (or that changed since it did): writing would lose them."""
    found = not_own(folder, names)
    if not found:
        return
    listed = shortlist(found, NAMED)
    them = "it" if len(found) == 1 else "them"
    raise UserError(
        f"'{folder}' holds {listed}, which dmg-domainbed did not write there or which changed "
        f"since it did (it records what it writes in {RECORD}); writing its outputs would "
        f"overwrite {them}. Nothing was written. Give another output folder, or move {them} "
        "away (files an earlier version wrote, which kept no record, can be deleted)."
    )


@contextlib.contextmanager
def staged(folder: Path) -> Iterator[Path]:
    """A new, empty staging folder to write ``folder``'s files into. When the block ends
    without an error, its files replace those of the same names in ``folder`` (only the
    package's own: else :class:`UserError` and nothing moved) and are recorded; the staging
    folder is removed in any case, and on an error so are the folders made for it."""
    made = [path for path in (folder, *folder.absolute().parents) if not path.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=folder))
    try:
        yield stage
        written = sorted(stage.iterdir())
        refuse_overwriting(folder, [path.name for path in written])
        own = recorded(folder)
        for path in written:
            own[path.name] = _digest(path)
            os.replace(path, folder / path.name)
        record = stage / RECORD
        record.write_text(json.dumps({"files": dict(sorted(own.items()))}, indent=1) + "\n")
        os.replace(record, folder / RECORD)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        for path in made:  # deepest first; only those still empty
            with contextlib.suppress(OSError):
                path.rmdir()
        raise
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def placed(files: Iterable[Path], folder: Path) -> list[Path]:
    """Where ``files``, written into a staging folder, lie in ``folder`` once moved."""
    return [folder / path.name for path in files]
