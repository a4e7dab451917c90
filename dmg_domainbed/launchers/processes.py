"""The process of one running job, started fresh or forked warm, behind one interface.

Both kinds lead a process group of their own (see :mod:`.lifetime`). When a job's process
ends, whatever it left running in its group (e.g. data-loader workers) is killed before the
process is reaped, while its id still names the group; a job's leftovers never outlive it.

Stdlib only.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from collections.abc import Sequence

from dmg_domainbed.launchers.lifetime import signal_group

_POLL_SECONDS = 0.05  # where the system cannot wait on several processes at once


class JobProcess:
    """A job's main process: ``poll`` and ``wait`` give its exit status as
    :attr:`subprocess.Popen.returncode` does (``-N``: killed by signal ``N``)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def _reap(self, block: bool) -> int | None:
        raise NotImplementedError

    def _ended(self, block: bool) -> bool | None:
        """Whether the process has ended, leaving it unreaped (a zombie keeps its id taken);
        None where the system cannot tell without reaping it."""
        if not hasattr(os, "waitid"):
            return None
        flags = os.WEXITED | os.WNOWAIT | (0 if block else os.WNOHANG)
        try:
            return os.waitid(os.P_PID, self.pid, flags) is not None
        except ChildProcessError:
            return True

    def _finish(self, block: bool) -> int | None:
        ended = self._ended(block)
        if ended is False:
            return None
        if ended:
            signal_group(self.pid, signal.SIGKILL)
        self.returncode = self._reap(block)
        return self.returncode

    def poll(self) -> int | None:
        """The exit status if the process has ended (its group's leftovers killed), else None."""
        return self.returncode if self.returncode is not None else self._finish(block=False)

    def wait(self) -> int:
        """Wait for the process to end; its exit status."""
        if self.returncode is None:
            self._finish(block=True)
        return self.returncode


class FreshProcess(JobProcess):
    """A job started as a new process (:class:`subprocess.Popen`)."""

    def __init__(self, popen: subprocess.Popen) -> None:
        super().__init__(popen.pid)
        self.popen = popen

    def _reap(self, block: bool) -> int | None:
        return self.popen.wait() if block else self.popen.poll()


class ForkedProcess(JobProcess):
    """A job forked from this process."""

    def _reap(self, block: bool) -> int | None:
        pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        return os.waitstatus_to_exitcode(status) if pid else None


def wait_for_an_end(processes: Sequence[JobProcess], timeout: float) -> None:
    """Return when one of ``processes`` has ended, or after ``timeout`` seconds."""
    descriptors = []
    try:
        for process in processes:
            descriptors.append(os.pidfd_open(process.pid))
    except (AttributeError, OSError):
        time.sleep(min(timeout, _POLL_SECONDS))
        return
    finally:
        if len(descriptors) != len(processes):
            for descriptor in descriptors:
                os.close(descriptor)
    try:
        select.select(descriptors, [], [], timeout)
    finally:
        for descriptor in descriptors:
            os.close(descriptor)


def stop(processes: Sequence[JobProcess], grace_seconds: float) -> None:
    """End every process's group: SIGTERM, then SIGKILL after ``grace_seconds``; reap them."""
    for process in processes:
        if process.returncode is None:
            signal_group(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    running = [p for p in processes if p.poll() is None]
    while running and time.monotonic() < deadline:
        wait_for_an_end(running, deadline - time.monotonic())
        running = [p for p in running if p.poll() is None]
    for process in running:
        signal_group(process.pid, signal.SIGKILL)
        process.wait()
