"""Whether a sweep's job commands fit in a command line this machine can start.

DomainBed's sweep writes each job as one command, ``python -m domainbed.scripts.train ...
--hparams '<JSON>'``, with the fixed hparams of its group in it, and its launchers start it as a
new process: DomainBed's ``local`` launcher and the Slurm tasks through ``sh -c COMMAND``, where
the whole command is one argument; ``local_parallel`` with ``warm = false`` by executing its
words. (The command is also what a user copies from a log to run a job again by hand.) The
system bounds what one ``execve`` takes (``execve(2)``): on Linux one argument of at most 32
pages (``MAX_ARG_STRLEN``, 128 KiB with 4 KiB pages), and everywhere the arguments and the
environment together, with a pointer for each string, at most ``sysconf(SC_ARG_MAX)``. A
command past either fails with ``OSError: Argument list too long`` once its job folder exists;
:func:`check_commands` refuses it before any is made.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from dmg_domainbed.errors import UserError

#: Linux's bound on one argument of ``execve``, in pages (``MAX_ARG_STRLEN``).
ARGUMENT_PAGES = 32
#: ``sh -c COMMAND``: the arguments besides the command.
_SHELL_ARGUMENTS = ("/bin/sh", "-c")
_POINTER = 8


def argument_limit() -> int | None:
    """The most bytes one argument may hold here (its final NUL included); ``None`` where the
    system bounds only the total."""
    if sys.platform.startswith("linux"):
        return ARGUMENT_PAGES * os.sysconf("SC_PAGE_SIZE")
    return None


def total_limit() -> int:
    """The most bytes the arguments and the environment of a new process may hold together."""
    return os.sysconf("SC_ARG_MAX")


def _size(text: str) -> int:
    """Bytes a string takes in ``execve``'s arguments or environment: its text, its NUL and
    the pointer to it."""
    return len(text.encode()) + 1 + _POINTER


def environment_size(environ: Mapping[str, str]) -> int:
    return sum(_size(f"{name}={value}") for name, value in environ.items()) + _POINTER


def check_commands(jobs: Sequence[Any], environ: Mapping[str, str]) -> None:
    """:class:`UserError` when the longest command of ``jobs`` (DomainBed ``Job`` objects) is
    too long to start as ``sh -c COMMAND`` with ``environ``, naming its longest fixed hparams."""
    if not jobs:
        return
    job = max(jobs, key=lambda job: len(job.command_str.encode()))
    command = job.command_str
    length, one = len(command.encode()) + 1, argument_limit()
    total = sum(map(_size, (*_SHELL_ARGUMENTS, command))) + _POINTER
    room = total_limit() - environment_size(environ)
    if one is not None and length > one:
        bound = (
            f"Linux passes at most {one:,} bytes in one argument ({ARGUMENT_PAGES} pages), and "
            "DomainBed's local launcher and Slurm tasks run each command as one argument of "
            "`sh -c`"
        )
    elif total > room:
        bound = (
            f"this machine passes a new process at most {total_limit():,} bytes of arguments "
            f"and environment (SC_ARG_MAX), and the jobs' environment takes "
            f"{total_limit() - room:,} of them"
        )
    else:
        return
    raise UserError(
        f"the jobs' command lines are too long to start: the longest, of "
        f"{job.train_args.get('algorithm')} on {job.train_args.get('dataset')}, is "
        f"{length:,} bytes, and {bound}. {_longest_hparams(job.train_args.get('hparams'))}"
        "Nothing was created."
    )


def _longest_hparams(text: str | None) -> str:
    """Which fixed hparams make a command long, and how to shorten them."""
    try:
        hparams = json.loads(text) if text else {}
    except json.JSONDecodeError:
        return ""
    if not isinstance(hparams, dict) or not hparams:
        return ""
    sizes = sorted(((len(json.dumps(v)), k) for k, v in hparams.items()), reverse=True)
    listed = ", ".join(f"{name} ({size:,} bytes)" for size, name in sizes[:3])
    return (
        f"The fixed hparams (--hparams, {len(text.encode()):,} bytes of JSON) make it long, "
        f"most of all {listed}: shorten them in the sweep file (a list of layers: 'auto' or "
        "fewer names). "
    )
