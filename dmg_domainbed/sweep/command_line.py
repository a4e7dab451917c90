"""Whether a sweep's job commands fit in a command line this machine can start: DomainBed
puts the group's ``--hparams`` JSON in each command and starts it as ``sh -c COMMAND``, which
fails with ``Argument list too long`` past the system's bounds, once the job's folder exists."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from dmg_domainbed.errors import UserError


def check_commands(jobs: Sequence[Any], environ: Mapping[str, str]) -> None:
    """:class:`UserError` when the longest command of ``jobs`` is too long to start as
    ``sh -c COMMAND`` with ``environ`` (the system itself is asked)."""
    if not jobs:
        return
    job = max(jobs, key=lambda job: len(job.command_str.encode()))
    try:  # the command as sh's $0 beside a no-op: started exactly as long, and run not at all
        subprocess.run(["/bin/sh", "-c", ":", job.command_str], env=dict(environ), check=False)
    except OSError as error:
        if error.errno != errno.E2BIG:
            raise
        args, hparams = job.train_args, job.train_args.get("hparams") or "{}"
        sizes = sorted(((len(json.dumps(v)), k) for k, v in json.loads(hparams).items()))[::-1]
        listed = ", ".join(f"{name} ({size:,} bytes)" for size, name in sizes[:3])
        length, one = len(job.command_str.encode()), 32 * os.sysconf("SC_PAGE_SIZE")
        raise UserError(
            f"the jobs' command lines are too long to start: the longest, of "
            f"{args.get('algorithm')} on {args.get('dataset')}, is {length:,} bytes, and this "
            f"machine refuses it ({error.strerror}; Linux takes at most 32 pages, {one:,} bytes, "
            f"in one argument and {os.sysconf('SC_ARG_MAX'):,} of arguments and environment "
            f"together). The fixed hparams (--hparams, {len(hparams.encode()):,} bytes of JSON) "
            f"make it long, most of all {listed}: shorten them in the sweep file (a list of "
            "layers: 'auto' or fewer names). Nothing was created."
        ) from None
