"""``dmg-domainbed install-domainbed``: DomainBed at the tested commit, importable in this Python.

DomainBed is not on the package registry and has no packaging of its own, so this package cannot
depend on it. This module does what a user would do by hand, in three steps:

1. ``git clone --no-checkout SOURCE`` into a temporary folder beside the target (``SOURCE``: the
   GitHub repository, or, on clusters without GitHub, a local checkout, a bare repository or
   another URL), then ``git checkout --detach TESTED_DOMAINBED_COMMIT``, and only then rename the
   folder into place: a failed clone leaves nothing half-made.
2. Check that the folder holds DomainBed (``domainbed/algorithms.py``).
3. Write :data:`PTH_NAME` into this environment's ``purelib`` (``sysconfig``'s site-packages):
   one line, the checkout's folder, which Python's ``site`` puts on ``sys.path`` at start-up.

Safe to run twice: a checkout already at the tested commit and a ``.pth`` already naming it are
left as they are. A folder at another commit, a folder that is not a DomainBed checkout, or a
``.pth`` naming another folder stop the command with what is there and how to fix it; only
``force=True`` checks out the tested commit in an existing checkout (git itself refuses to
overwrite local edits) or rewrites the ``.pth``.

The commit is pinned in one place, :data:`dmg_domainbed.TESTED_DOMAINBED_COMMIT`. Stdlib and the
``git`` command only: it runs before DomainBed, and before anything DomainBed needs, is there.
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

DOMAINBED_URL = "https://github.com/facebookresearch/DomainBed"
#: The file in site-packages that makes the checkout importable (the name the README's manual
#: set-up has always used, so that a hand-made one is found too).
PTH_NAME = "domainbed_checkout.pth"
# A file every DomainBed checkout has at the package's top.
MARKER = Path("domainbed") / "algorithms.py"


def default_folder() -> Path:
    """Where the checkout goes unless ``--dir`` says otherwise: beside this environment's own
    files, ``<sys.prefix>/src/DomainBed`` (where pip puts editable VCS checkouts), so removing
    the environment removes it too."""
    return Path(sys.prefix) / "src" / "DomainBed"


def site_packages() -> Path:
    """This interpreter's ``purelib``: the site-packages folder whose ``.pth`` files it reads."""
    return Path(sysconfig.get_paths()["purelib"])


def pth_file(purelib: Path | None = None) -> Path:
    return (purelib or site_packages()) / PTH_NAME


def installed_folder(purelib: Path | None = None) -> Path | None:
    """The folder :data:`PTH_NAME` names, or ``None`` where there is no such file."""
    pth = pth_file(purelib)
    if not pth.is_file():
        return None
    lines = [line.strip() for line in pth.read_text().splitlines()]
    folders = [line for line in lines if line and not line.startswith(("#", "import "))]
    return Path(folders[0]) if folders else None


def _git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}  # never wait for a password
    command = ["git", "-c", "advice.detachedHead=false", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)


def _git_or_fail(*args: str, cwd: Path | None = None, doing: str) -> str:
    answer = _git(*args, cwd=cwd)
    if answer.returncode != 0:
        message = (answer.stderr or answer.stdout).strip()
        raise UserError(f"{doing} failed: `git {' '.join(args)}` said: {message}")
    return answer.stdout.strip()


def checkout_commit(folder: Path) -> str | None:
    """The commit checked out at the top of ``folder``, or ``None`` if it is not a git checkout's
    top folder."""
    top = _git("rev-parse", "--show-toplevel", cwd=folder)
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != folder.resolve():
        return None
    head = _git("rev-parse", "--verify", "HEAD", cwd=folder)
    return head.stdout.strip() if head.returncode == 0 else None


def _is_local(source: str) -> bool:
    return "://" not in source and not (":" in source and "@" in source.split(":")[0])


def install_domainbed(
    source: str = DOMAINBED_URL,
    folder: Path | None = None,
    purelib: Path | None = None,
    force: bool = False,
    commit: str = TESTED_DOMAINBED_COMMIT,
    say: Callable[[str], None] = print,
) -> Path:
    """Check out DomainBed at ``commit`` from ``source`` into ``folder`` and make it importable
    through :data:`PTH_NAME` in ``purelib``; returns the folder. Raises :class:`UserError`,
    before changing anything, where something is in the way."""
    if shutil.which("git") is None:
        raise UserError("`git` is not on PATH: install git (e.g. `apt install git`) and run again")
    folder = Path(os.path.abspath(folder or default_folder()))
    pth = pth_file(purelib)
    if _is_local(source):
        source = os.path.abspath(source)
        if not os.path.isdir(source):
            raise UserError(
                f"--from {source}: no such folder; give a DomainBed git checkout, a bare "
                f"repository or a URL (default: {DOMAINBED_URL})"
            )
    named = installed_folder(purelib)
    if named is not None and named != folder and not force:
        raise UserError(
            f"{pth} already makes {named} importable, not {folder}: run with `--dir {named}` to "
            f"use that checkout, or `--force` to point {PTH_NAME} at {folder}"
        )

    if folder.exists() and any(folder.iterdir()):
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
    _git_or_fail("fetch", source, cwd=folder, doing=f"fetching from {source}")
    _checkout(folder, commit, source)
    say(f"{folder}: checked out the tested commit {commit[:12]} (was {there[:12]})")


def _checkout(folder: Path, commit: str, source: str) -> None:
    if _git("cat-file", "-e", f"{commit}^{{commit}}", cwd=folder).returncode != 0:
        raise UserError(
            f"{source} does not hold DomainBed's tested commit {commit}; give --from a clone "
            "of facebookresearch/DomainBed with its history (not a shallow one)"
        )
    _git_or_fail("checkout", "--detach", commit, cwd=folder, doing=f"checking out {commit[:12]}")


def _clone(source: str, folder: Path, commit: str, say) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    say(f"cloning DomainBed from {source} into {folder}")
    partial = Path(tempfile.mkdtemp(prefix=f".{folder.name}.partial-", dir=folder.parent))
    try:
        _git_or_fail("clone", "--quiet", "--no-checkout", source, str(partial), doing="cloning")
        _checkout(partial, commit, source)
        if not (partial / MARKER).is_file():
            raise UserError(f"{source} at commit {commit[:12]} has no {MARKER}: not DomainBed")
        if folder.exists():
            folder.rmdir()  # empty (checked by the caller)
        partial.rename(folder)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    say(f"{folder}: DomainBed at the tested commit {commit[:12]}")
