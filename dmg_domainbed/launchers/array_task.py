"""What each Slurm array task runs: one DomainBed command, as DomainBed's ``local`` launcher does,
safe to run again after submitit requeues a pre-empted job.

A job whose ``done`` file exists is not run again; the files of an unfinished attempt move into
``interrupted_attempt_N`` in its folder (DomainBed appends to ``results.jsonl``: a new attempt
starts from an empty folder). The command runs in a process group of its own and ignores
submitit's pre-emption signal, which is for this process. Stdlib only: it runs on the nodes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from dmg_domainbed.launchers.common import output_dir_of

LINK_NAMES = {"stdout": "submitit.out", "stderr": "submitit.err"}
INTERRUPTED_PREFIX = "interrupted_attempt_"
KILLED_COMMAND_WAIT_S = 120  # for Slurm's next step after its SIGTERM: requeue or SIGKILL


class CommandFailed(RuntimeError):
    """A job's command failed (what it printed is in the job's error log)."""


def set_aside_interrupted_attempt(folder: Path) -> Path | None:
    """Move what an earlier, unfinished attempt of a job left in its folder into
    ``interrupted_attempt_N``; the log links stay. Returns that folder, if anything moved."""
    if not folder.is_dir():
        return None
    earlier = [e for e in folder.iterdir() if e.name.startswith(INTERRUPTED_PREFIX)]
    kept = {*LINK_NAMES.values(), *(e.name for e in earlier)}
    leftovers = [e for e in folder.iterdir() if e.name not in kept]
    if not leftovers:
        return None
    target = folder / f"{INTERRUPTED_PREFIX}{len(earlier) + 1}"
    target.mkdir()
    for entry in leftovers:
        entry.rename(target / entry.name)
    return target


def run_command(command: str) -> None:
    """Run one DomainBed command in its job's folder; :class:`CommandFailed` if it fails. When
    Slurm stops the command itself, Slurm's next step is waited for instead."""
    output_dir = output_dir_of(command)
    if output_dir is not None:
        if (Path(output_dir) / "done").exists():
            print(f"{output_dir} is done: not run again", flush=True)
            return
        moved = set_aside_interrupted_attempt(Path(output_dir))
        if moved is not None:
            print(f"files of an interrupted attempt moved to {moved}", flush=True)
    preemption = getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"))
    process = subprocess.Popen(
        command,
        shell=True,
        start_new_session=True,  # a group of its own, killed whole if this process is stopped
        preexec_fn=lambda: signal.signal(preemption, signal.SIG_IGN),  # submitit's, for us
    )
    try:
        code = process.wait()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    if code == 0:
        return
    killed_by = -code if code < 0 else code - 128 if code > 128 else None  # direct, or via sh
    if killed_by == signal.SIGTERM and "SLURM_JOB_ID" in os.environ:  # cancel, pre-emption, time
        time.sleep(KILLED_COMMAND_WAIT_S)
    how = f"was killed by signal {killed_by}" if killed_by else f"exited with status {code}"
    raise CommandFailed(f"the command {how}")
