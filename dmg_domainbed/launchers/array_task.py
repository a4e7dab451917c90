"""What each Slurm array task runs on its node: one DomainBed command, safe to run again.

A requeued job finds its folder as its earlier attempt left it: a job whose ``done`` file exists
is not run again, and what an interrupted attempt left (DomainBed appends to ``results.jsonl``)
is set aside first. Stdlib only: the tasks import this module on the nodes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from dmg_domainbed.launchers.common import output_dir_of, signal_group

LINK_NAMES = {"stdout": "submitit.out", "stderr": "submitit.err"}
INTERRUPTED_PREFIX = "interrupted_attempt_"
KILLED_COMMAND_WAIT_S = 120  # for Slurm's next step after its SIGTERM: requeue or SIGKILL


class CommandFailed(RuntimeError):
    """A job's command failed (what it printed is in the job's error log)."""


def run_command(command: str, environ: Mapping[str, str] | None = None) -> None:
    """One DomainBed command with ``environ`` over the node's environment, unless its job is
    done, after moving an interrupted attempt's files aside; :class:`CommandFailed` if it fails.
    It runs in a process group of its own, ignoring submitit's pre-emption signal (which is for
    this process); when Slurm stops it, Slurm's next step (requeue or SIGKILL) is waited for."""
    folder = Path(output_dir_of(command) or os.devnull)
    if (folder / "done").exists():
        print(f"{folder} is done: not run again", flush=True)
        return
    entries = list(folder.iterdir()) if folder.is_dir() else []
    attempts = [e for e in entries if e.name.startswith(INTERRUPTED_PREFIX)]
    leftovers = [e for e in entries if e not in attempts and e.name not in LINK_NAMES.values()]
    if leftovers:
        target = folder / f"{INTERRUPTED_PREFIX}{len(attempts) + 1}"
        target.mkdir()
        for entry in leftovers:
            entry.rename(target / entry.name)
        print(f"files of an interrupted attempt moved to {target}", flush=True)
    preemption = getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"))
    process = subprocess.Popen(
        command,
        shell=True,
        env={**os.environ, **(environ or {})},
        start_new_session=True,
        preexec_fn=lambda: signal.signal(preemption, signal.SIG_IGN),
    )
    try:
        code = process.wait()
    finally:  # what the command left running ends with it, and with this process
        signal_group(process.pid)
    if code == 0:
        return
    killed_by = -code if code < 0 else code - 128 if code > 128 else None  # direct, or via sh
    if killed_by == signal.SIGTERM and "SLURM_JOB_ID" in os.environ:  # cancel, pre-emption, time
        time.sleep(KILLED_COMMAND_WAIT_S)
    how = f"was killed by signal {killed_by}" if killed_by else f"exited with status {code}"
    raise CommandFailed(f"the command {how}")
