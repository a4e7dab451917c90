"""Jobs end with the launcher that started them, however it ends.

A job runs in a session (and process group) of its own, so that a Ctrl-C at the terminal
reaches the launcher alone, which then stops its jobs, and so that a job and what it started
(DomainBed's data-loader workers) can be signalled as one group. A separate session no longer
ties the job to the launcher: killed outright (``kill -9``, the out-of-memory killer), the
launcher would leave its jobs running. On Linux each job therefore asks the kernel for SIGTERM
when its parent dies (``prctl(PR_SET_PDEATHSIG)``); no library offers that call. A warm job's
parent is the fork server, which exits when the launcher does.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def parent_death_signal_supported() -> bool:
    """Whether :func:`die_with_parent` can tie a process to its parent on this system."""
    return _libc is not None


def die_with_parent(parent_pid: int) -> None:
    """Have the kernel send SIGTERM to this process when its parent dies; end at once if the
    parent (``parent_pid``) is already gone. Nothing happens where there is no such request."""
    if _libc is None:
        return
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGTERM)


def signal_group(leader_pid: int, signal_number: int) -> None:
    """Send ``signal_number`` to the process group a job leads, if it still exists."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader_pid, signal_number)
