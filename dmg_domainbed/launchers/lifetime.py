"""Jobs end with the launcher that started them, however it ends.

A job runs in a session (and process group) of its own, so that a Ctrl-C at the terminal
reaches the launcher alone and the launcher decides how its jobs stop, and so that a job and
everything it started (DomainBed's data-loader workers) can be signalled as one group. The
price of a separate session is that nothing ties the job to the launcher any more: killed
outright (``kill -9``, an out-of-memory kill), the launcher would leave its jobs running
unsupervised. On Linux each job therefore asks the kernel for a signal when its parent dies
(``prctl(PR_SET_PDEATHSIG)``), which holds for every way the launcher can end.

Stdlib only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Callable

# From <linux/prctl.h>.
_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    except OSError:
        return None
    return getattr(libc, "prctl", None)


_prctl = _load_prctl()


def parent_death_signal_supported() -> bool:
    """Whether :func:`die_with_parent` can tie a process to its parent on this system."""
    return _prctl is not None


def die_with_parent(parent_pid: int, signal_number: int = signal.SIGTERM) -> None:
    """Have the kernel send ``signal_number`` to this process when its parent dies.

    Called in a job process between fork and exec (or at the start of a forked job). The
    parent may already have died before the request was made; the process then ends at once,
    as the signal would have ended it. Nothing is done where the kernel has no such request.
    """
    if _prctl is None:
        return
    _prctl(_PR_SET_PDEATHSIG, signal_number, 0, 0, 0)
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signal_number)


def parent_death_hook(parent_pid: int | None = None) -> Callable[[], None]:
    """A ``preexec_fn`` for :class:`subprocess.Popen` that ties the child to this process."""
    parent = os.getpid() if parent_pid is None else parent_pid

    def tie_to_parent() -> None:
        die_with_parent(parent)

    return tie_to_parent


def signal_group(leader_pid: int, signal_number: int) -> bool:
    """Send ``signal_number`` to the process group led by ``leader_pid``; False if it is gone.

    Every job leads its own group, so this reaches the job and whatever it started. Call it
    only while the leader is alive or a zombie not yet reaped: its id cannot be reused then, so
    the signal never reaches an unrelated process.
    """
    try:
        os.killpg(leader_pid, signal_number)
    except (ProcessLookupError, PermissionError):
        return False
    return True
