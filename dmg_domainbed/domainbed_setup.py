"""``dmg-domainbed install-domainbed``: DomainBed (not on the package registry) at the tested
commit, importable in this Python, as a user would do it by hand: cloned into a temporary folder
beside the target, checked out and checked, and only then renamed into place (a failure leaves
nothing half-made); then :data:`PTH_NAME` names it in ``purelib``. Stdlib and ``git`` only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from pathlib import Path

from dmg_domainbed import TESTED_DOMAINBED_COMMIT
from dmg_domainbed.errors import UserError
from dmg_domainbed.folders import check_creatable

DOMAINBED_URL = "https://github.com/facebookresearch/DomainBed"
#: The file in site-packages that makes the checkout importable (the name the README's manual
#: set-up has always used, so that a hand-made one is found too).
PTH_NAME = "domainbed_checkout.pth"
# A file every DomainBed checkout has at the package's top.
MARKER = Path("domainbed") / "algorithms.py"


def pth_file(purelib: Path | None = None) -> Path:
    """:data:`PTH_NAME` in ``purelib``, by default this interpreter's site-packages."""
    return Path(purelib or sysconfig.get_paths()["purelib"]) / PTH_NAME


def installed_folder(purelib: Path | None = None) -> Path | None:
    """The folder :data:`PTH_NAME` names, or ``None`` where there is no such file."""
    pth = pth_file(purelib)
    if not pth.is_file():
        return None
    lines = [line.strip() for line in pth.read_text().splitlines()]
    folders = [line for line in lines if line and not line.startswith(("#", "import "))]
    return Path(folders[0]) if folders else None


def _git(*args: str, cwd: Path | None = None, timeout: float | None = None):
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}  # never wait for a password
    command = ["git", "-c", "advice.detachedHead=false", *args]
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def checkout_commit(folder: Path) -> str | None:
    """The commit checked out at the top of ``folder``, or ``None`` (not a checkout's top, no
    git, or git silent for 30 s: a stuck network file system)."""
    try:
        top = _git("rev-parse", "--show-toplevel", cwd=folder, timeout=30)
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != folder.resolve():
            return None
        head = _git("rev-parse", "--verify", "HEAD", cwd=folder, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() if head.returncode == 0 else None


def _is_local(source: str) -> bool:
    return "://" not in source and not (":" in source and "@" in source.split(":")[0])


def _check_source(source: str) -> str:
    """``source``, absolute where local; :class:`UserError` for a missing or non-git folder."""
    if not _is_local(source):
        return source
    source = os.path.abspath(source)
    allowed = (
        "give --from a DomainBed git checkout or bare repository (made where GitHub can be "
        f"reached with `git clone {DOMAINBED_URL}`), or a URL (default: {DOMAINBED_URL})"
    )
    if not os.path.isdir(source):
        raise UserError(f"--from {source}: no such folder; {allowed}")
    if _git("ls-remote", "--heads", source).returncode != 0:
        raise UserError(f"--from {source} is a folder but not a git repository; {allowed}")
    return source


def install_domainbed(
    source: str = DOMAINBED_URL,
    folder: Path | None = None,
    purelib: Path | None = None,
    force: bool = False,
    commit: str = TESTED_DOMAINBED_COMMIT,
    say: Callable[[str], None] = print,
) -> Path:
    """Check out DomainBed at ``commit`` from ``source`` into ``folder``, importable through
    :data:`PTH_NAME` in ``purelib``; returns the folder. What is in the way (a source that is
    not a git repository, a folder or ``.pth`` not writable, or of another kind without
    ``force``) is a :class:`UserError` before anything changes; a second run changes nothing."""
    if shutil.which("git") is None:
        raise UserError("`git` is not on PATH: install git (e.g. `apt install git`) and run again")
    # By default beside the environment's own files, where pip puts editable VCS checkouts.
    folder = Path(os.path.abspath(folder or Path(sys.prefix) / "src" / "DomainBed"))
    pth = pth_file(purelib)
    source = _check_source(source)
    named = installed_folder(purelib)
    if named is not None and named != folder and not force:
        raise UserError(
            f"{pth} already makes {named} importable, not {folder}: run with `--dir {named}` to "
            f"use that checkout, or `--force` to point {PTH_NAME} at {folder}"
        )
    existing = folder.is_dir() and any(folder.iterdir())
    if not existing:
        check_creatable(folder, "--dir")
    if named != folder:
        try:
            check_creatable(pth.parent, f"{PTH_NAME} in this Python's site-packages")
            if pth.exists() and not os.access(pth, os.W_OK):
                raise UserError(f"{pth} cannot be written.")
        except UserError as error:
            raise UserError(
                f"{error} Nothing was changed: run the command with a Python whose site-packages "
                "you can write (a virtual environment), or as a user who may write there."
            ) from None

    if existing:
        _use_existing(folder, source, commit, force, say)
    else:
        _clone(source, folder, commit, say)

    if named == folder:
        say(f"{pth} already makes {folder} importable: left as it is")
    else:
        pth.parent.mkdir(parents=True, exist_ok=True)
        pth.write_text(f"{folder}\n")
        say(f"wrote {pth}: `import domainbed` now finds {folder / 'domainbed'}")
    return folder


def _use_existing(folder: Path, source: str, commit: str, force: bool, say) -> None:
    there = checkout_commit(folder)
    if there is None or not (folder / MARKER).is_file():
        raise UserError(
            f"{folder} exists and is not a DomainBed git checkout; nothing was changed. Give "
            "another --dir, or move that folder away and run again"
        )
    if there == commit:
        say(f"{folder} already holds DomainBed at the tested commit {commit[:12]}: left as it is")
        return
    if not force:
        raise UserError(
            f"{folder} holds DomainBed at commit {there[:12]}, not the tested {commit[:12]}; "
            f"nothing was changed. To check out the tested commit there, run again with "
            f"`--force` (git keeps any local edits and refuses if they are in the way), or give "
            f"another --dir"
        )
    fetched = _git("fetch", source, cwd=folder)
    if fetched.returncode != 0:
        raise _fetch_failed(source, fetched)
    _checkout(folder, commit, source)
    say(f"{folder}: checked out the tested commit {commit[:12]} (was {there[:12]})")


def _checkout(folder: Path, commit: str, source: str) -> None:
    answer = _git("checkout", "--detach", commit, cwd=folder)
    if answer.returncode != 0:
        raise UserError(
            f"`git checkout --detach {commit}` failed: "
            f"{(answer.stderr or answer.stdout).strip()}\nWhere {source} lacks that commit, give "
            "--from a clone of facebookresearch/DomainBed with its history (not a shallow one)"
        )


def _fetch_failed(source: str, answer: subprocess.CompletedProcess) -> UserError:
    """Git could not fetch from ``source``: its message, and for a URL how to do without it."""
    message = (answer.stderr or answer.stdout).strip()
    if _is_local(source):
        return UserError(f"git could not read {source}: {message}")
    return UserError(
        f"git could not fetch DomainBed from {source}: {message}\nWhere this machine cannot reach "
        f"{source} (no network, a proxy, GitHub blocked on a cluster), clone it on a machine "
        f"that can (`git clone {DOMAINBED_URL}`), copy that folder here and run again with "
        "`--from THAT_FOLDER`; nothing was changed"
    )


def _clone(source: str, folder: Path, commit: str, say) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    say(f"cloning DomainBed from {source} into {folder}")
    with tempfile.TemporaryDirectory(prefix=f".{folder.name}.partial-", dir=folder.parent) as to:
        partial = Path(to) / folder.name
        answer = _git("clone", "--quiet", "--no-checkout", source, str(partial))
        if answer.returncode != 0:
            raise _fetch_failed(source, answer)
        _checkout(partial, commit, source)
        if not (partial / MARKER).is_file():
            raise UserError(f"{source} at commit {commit[:12]} has no {MARKER}: not DomainBed")
        if folder.exists():
            folder.rmdir()  # empty (checked by the caller)
        partial.rename(folder)
    say(f"{folder}: DomainBed at the tested commit {commit[:12]}")
