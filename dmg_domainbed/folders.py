"""Output folders given by the user: checked before any work, so a bad path is a clear error."""

from __future__ import annotations

from pathlib import Path

from dmg_domainbed.errors import UserError


def check_creatable(folder: Path, option: str) -> Path:
    """``folder``, if it is a folder or can be created as one; else a :class:`UserError`
    naming ``option`` (e.g. ``--output_dir``) and the file in the way."""
    for path in (folder, *folder.parents):
        if path.exists():
            if not path.is_dir():
                where = "is a file" if path == folder else f"lies under '{path}', which is a file"
                raise UserError(
                    f"{option} '{folder}' {where}, so it cannot be a folder. Give a folder path "
                    "that is free or already a folder."
                )
            break
    return folder
