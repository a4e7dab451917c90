"""Output folders given by the user: checked before any work, so a bad path is a clear error."""

from __future__ import annotations

import os
from pathlib import Path

from dmg_domainbed.errors import UserError


def check_creatable(folder: Path, option: str) -> Path:
    """``folder``, if it is a folder this process can write into or can create, and not the file
    system's root (where a command's folders and files would lie among the system's); else a
    :class:`UserError` naming ``option`` (e.g. ``--output_dir``) and what is in the way."""
    folder = Path(folder)
    resolved = folder.resolve()
    if resolved == resolved.parent:
        raise UserError(
            f"{option} '{folder}' is the root of the file system: what the command writes would "
            "lie among the system's folders. Give a folder of its own, e.g. ./runs/NAME."
        )
    for path in (folder, *folder.absolute().parents):
        if not path.exists():
            continue
        if not path.is_dir():
            where = "is a file" if path == folder else f"lies under '{path}', which is a file"
            raise UserError(
                f"{option} '{folder}' {where}, so it cannot be a folder. Give a folder path "
                "that is free or already a folder."
            )
        if not os.access(path, os.W_OK | os.X_OK):
            where = "is not writable" if path == folder else f"cannot be made in '{path}'"
            raise UserError(
                f"{option} '{folder}' {where}: this user ({_user()}) may not write there. "
                "Give a folder you can write to, or change its permissions."
            )
        return folder
    return folder


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return str(os.geteuid())


def check_outside(output: Path, inputs, name: str, read: str, choose: str, why: str = "") -> None:
    """:class:`UserError` if ``output`` (``name``) is or lies inside a folder of ``inputs``
    (``read`` folders, which are only read; ``why`` it matters): choose another (``choose``)
    outside it."""
    for folder in inputs:
        if output.resolve() == folder.resolve() or folder.resolve() in output.resolve().parents:
            raise UserError(
                f"{name} '{output}' lies inside the {read} folder '{folder}', which is only "
                f"read{why}. Choose {choose} outside it."
            )
