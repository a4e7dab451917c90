"""Output folders given by the user: checked before any work, so a bad path is a clear error;
and names taken from runs' records made safe to be part of a path."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from urllib.parse import quote

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


#: Kept as they are in :func:`path_part`, besides letters, digits and ``_.-~``.
READABLE = " ()+,=@"
LONGEST_PART = 100  # characters of a path part; file systems allow 255 bytes for a whole name


def path_part(value: object) -> str:
    """``value`` (a field of a run's record: an algorithm, a dataset, a seed) as one file or
    folder name, never a path: percent-escaped as in URLs (``/`` becomes ``%2F``), a leading
    ``.`` too, so that it names neither another folder, nor a parent, nor a hidden file. Names
    that need no escape (``DMG``, ``ERM (bf16)``, ``RotatedDigits``) stay as they are; distinct
    values stay distinct; one over :data:`LONGEST_PART` characters is cut, with a hash of it."""
    part = quote(str(value), safe=READABLE)
    part = "%2E" + part[1:] if part.startswith(".") else part or "%"
    if len(part) > LONGEST_PART:
        digest = hashlib.sha256(part.encode()).hexdigest()[:16]
        part = f"{part[: LONGEST_PART - 17]}~{digest}"
    return part
