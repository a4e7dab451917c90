"""One run at a time per output folder: ``with FolderLock(output_dir): ...``, flufl.lock's
NFS-safe lock refreshed by a daemon thread. Added (docs/contributing.md says why): the claim's
host names the pid namespace; a holder here is stale once no process of its pid started before
the last refresh, one elsewhere once its lock expired; of several takers of a stale lock, the one
that removes its claim file removes the lock.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple

import psutil
from flufl.lock import SEP, Lock, NotLockedError, TimeOutError

from dmg_domainbed.errors import UserError

LOCK_NAME = ".dmg-domainbed.lock"
REFRESH_S = 30.0
LIFETIME_S = 300  # how long a lock outlives its last refresh, for other machines
STALE_WAIT_S = 10.0  # how long a stale lock may resist its takers
logging.getLogger("flufl.lock").propagate = False  # it logs every refused attempt as an error


@functools.cache
def _machine() -> str:
    """This host and pid namespace, where a pid names one process (the host alone elsewhere)."""
    try:
        return f"{socket.getfqdn()}~{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return socket.getfqdn()


class _Lock(Lock):
    hostname = property(lambda self: _machine())  # the host part of this process's claims


def _minutes(seconds: float) -> str:
    return f"{max(1, round(seconds / 60))} min"


class Holder(NamedTuple):
    """A lock as found: its claim (the lock file's content: path, host, pid), when it expires."""

    claim: str
    host: str
    pid: int
    expires: float
    here: bool

    def process(self) -> psutil.Process | None:
        """The holder's process, if it runs here: its pid, started before the last refresh
        (flufl.lock writes the expiry in whole seconds)."""
        try:
            process = psutil.Process(self.pid)
            if process.create_time() < self.expires - LIFETIME_S + 1:
                return None if process.status() == psutil.STATUS_ZOMBIE else process
        except (psutil.Error, ValueError):
            pass
        return None

    def stale(self) -> bool:
        return self.process() is None if self.here else time.time() > self.expires

    def describe(self) -> str:
        process = self.process() if self.here else None
        try:
            command, started = " ".join(process.cmdline()), process.create_time()
        except (AttributeError, psutil.Error):  # elsewhere, or gone
            return f"pid {self.pid} on {self.host.split('~')[0]}"
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
        return f"`{command}` (pid {self.pid} on {_machine().split('~')[0]}), running since {since}"


class FolderLock:
    """Exclusive use of ``folder`` by this process, as a context manager."""

    def __init__(self, folder: str | os.PathLike, refresh_s: float = REFRESH_S) -> None:
        self.folder, self.path = Path(folder), Path(folder) / LOCK_NAME
        self.refresh_s = refresh_s
        self.lock = _Lock(str(self.path), lifetime=LIFETIME_S)
        self.lost = False  # another process took the lock over while this one held it
        self._stop = threading.Event()
        self._refreshing: threading.Thread | None = None

    def __enter__(self) -> FolderLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()

    def acquire(self) -> None:
        """Take the lock, or raise :class:`UserError` naming the run that holds it."""
        if self.path.is_dir():
            raise UserError(
                f"{self.path} is the lock of an earlier version of this package: once no run of "
                f"that version works in {self.folder}, delete it (rm -r {self.path})"
            )
        deadline = time.monotonic() + STALE_WAIT_S
        while time.monotonic() < deadline:  # a round ends when its lock is gone or stale
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                self.lock.lock(timeout=-1)  # already past: one try, never waiting nor breaking
                break
            except TimeOutError:
                holder = self.holder()
            except OSError as error:
                raise UserError(
                    f"cannot write into {self.folder}: {error.strerror} ({error.filename}); "
                    "choose another output folder"
                ) from None
            if holder and not holder.stale():
                advice = (
                    f"It runs on this machine: wait for it to finish or stop it (kill {holder.pid})"
                    if holder.here
                    else "Wait for it to finish or stop it. If that run is gone (e.g. its machine "
                    "crashed), its lock is taken over once it expires, in "
                    f"{_minutes(holder.expires - time.time())}; or delete {self.path} once you are "
                    f"sure nothing writes into {self.folder}"
                )
                raise UserError(
                    f"{self.folder} is in use by another run: {holder.describe()}. {advice}; or "
                    "choose another output folder."
                )
            if holder:
                self._take_over(holder)
            time.sleep(0.01)
        else:
            raise UserError(
                f"{self.folder}: its lock {self.path} is stale but cannot be taken over; delete it "
                f"once you are sure nothing writes into {self.folder}"
            )
        self._stop.clear()
        self._refreshing = threading.Thread(target=self._refresh, name="folder-lock", daemon=True)
        self._refreshing.start()

    def release(self) -> None:
        """Give the lock up (if it is still this process's)."""
        self._stop.set()
        if self._refreshing is not None:
            self._refreshing.join()
        self.lock.unlock(unconditionally=True)

    def holder(self) -> Holder | None:
        """The lock as it is now; None when there is none."""
        try:
            with open(self.path) as lock:  # opening refreshes NFS's cached file times
                claim, expires = lock.read(), os.fstat(lock.fileno()).st_mtime
        except FileNotFoundError:
            return None
        _, host, pid, *_ = [*claim.split(SEP), "?", "0"]
        return Holder(claim, host, int(pid) if pid.isdigit() else 0, expires, host == _machine())

    def _take_over(self, stale: Holder) -> None:
        """Remove the stale lock: the one taker that removes its claim file removes the lock file,
        which is then still the one judged; the others find the claim gone."""
        with contextlib.suppress(FileNotFoundError):
            (self.folder / Path(stale.claim).name).unlink()
            self.path.unlink()

    def _refresh(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                self.lock.refresh()
            except NotLockedError:
                self.lost, holder = True, self.holder()
                sys.stderr.write(
                    f"dmg-domainbed: this process lost its lock of {self.folder} (was it stopped "
                    f"for over {_minutes(LIFETIME_S)}?), now held by "
                    f"{holder.describe() if holder else 'nobody'}; results written from now on "
                    "may mix with another run's\n"
                )
                return
