"""One run at a time per output folder, on local disks and on clusters' shared filesystems.

A command that writes runs holds ``with FolderLock(output_dir): ...`` while it works. The lock
is :mod:`flufl.lock`'s (NFS-safe: a hard link to a claim file; its modification time is when it
expires, pushed :data:`LIFETIME_S` ahead every :data:`REFRESH_S` s by a daemon thread). Added
here, as flufl.lock leaves them to its users: a record beside the claim (host, pid, start,
command) that a refused command is shown; staleness (a holder on this machine, i.e. host, boot
and pid namespace, is stale once its process is gone; one on another machine once its lock
expired); and a takeover under a second flufl lock that removes a stale lock only if it still is
the one judged, so that of several takers exactly one wins.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import NamedTuple

import psutil
from flufl.lock import Lock, NotLockedError, TimeOutError

from dmg_domainbed.errors import UserError

LOCK_NAME = ".dmg-domainbed.lock"
REFRESH_S = 30.0
LIFETIME_S = 300.0  # how long a lock outlives its last refresh, for other machines
CONTENTION_WAIT_S = 10.0  # how long a contender waits for a takeover or a holder's record
logging.getLogger("flufl.lock").propagate = False  # it logs every refused attempt as an error


def _machine() -> str:
    """This host, boot and pid namespace: where a pid names the same process."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{socket.gethostname()}/{boot}{os.readlink('/proc/self/ns/pid')}"
    except OSError:  # not Linux: the host name alone
        return f"{socket.gethostname()}/"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{max(0.0, seconds):.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


class Holder(NamedTuple):
    """A lock as found: its claim (the lock file's content), expiry and holder's record."""

    claim: str
    expires: float
    host: str = "?"
    machine: str = "?"
    pid: int = 0  # 0: no record (yet)
    started: float = 0.0
    command: str = "?"

    def stale(self) -> bool:
        if self.machine != _machine():
            return time.time() > self.expires
        try:  # gone, or the pid now names a process started after the lock was taken
            process = psutil.Process(self.pid)
            later = process.create_time() > self.started + 1
            return later or process.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    def describe(self) -> str:
        if self.pid == 0:
            return "a run whose record is not readable"
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        ago = _duration(time.time() - self.started)
        return (
            f"`{self.command}` (pid {self.pid} on {self.host}), running since {started} ({ago} ago)"
        )


class FolderLock:
    """Exclusive use of ``folder`` by this process, as a context manager; ``command`` is what a
    second run is shown (default: this command line)."""

    def __init__(
        self, folder: str | os.PathLike, command: str | None = None, refresh_s: float = REFRESH_S
    ) -> None:
        self.folder, self.path = Path(folder), Path(folder) / LOCK_NAME
        self.command = command or " ".join(sys.orig_argv)
        self.refresh_s = refresh_s
        self.lock = Lock(str(self.path), lifetime=timedelta(seconds=LIFETIME_S))
        self.record = Path(f"{self.lock.claimfile}.json")
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
        deadline = time.monotonic() + CONTENTION_WAIT_S
        while True:
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                # a timeout already past: flufl.lock neither waits nor breaks a lock itself
                self.lock.lock(timeout=-1)
                break
            except TimeOutError:
                pass
            except OSError as error:
                raise UserError(
                    f"cannot write into {self.folder}: {error.strerror} ({error.filename}); "
                    "choose another output folder"
                ) from None
            holder, late = self.holder(), time.monotonic() > deadline
            if holder and holder.stale():
                self._take_over(holder)
            elif holder and (holder.pid or late):  # a holder writes its record right after
                raise UserError(f"{self.folder} is in use by another run: {self._advice(holder)}")
            if late:
                raise UserError(
                    f"{self.folder}: other processes kept taking its lock for "
                    f"{CONTENTION_WAIT_S:.0f} s; run one command at a time on this folder"
                )
            time.sleep(0.05)
        record = dict(host=socket.gethostname(), machine=_machine(), pid=os.getpid())
        # read while half written, it is no record yet: contenders wait for it
        self.record.write_text(json.dumps(dict(record, started=time.time(), command=self.command)))
        self._stop.clear()
        self._refreshing = threading.Thread(target=self._refresh, name="folder-lock", daemon=True)
        self._refreshing.start()

    def release(self) -> None:
        """Give the lock up (if it is still this process's)."""
        self._stop.set()
        if self._refreshing is not None:
            self._refreshing.join()
        self.record.unlink(missing_ok=True)
        self.lock.unlock(unconditionally=True)

    def holder(self) -> Holder | None:
        """The lock as it is now; None when there is none."""
        try:
            with open(self.path) as lock:  # opening refreshes NFS's cached file times
                claim, expires = lock.read(), os.fstat(lock.fileno()).st_mtime
        except FileNotFoundError:
            return None
        try:
            record = json.loads((self.folder / f"{Path(claim).name}.json").read_text())
            return Holder(claim, expires, **record)
        except (OSError, ValueError, TypeError):
            return Holder(claim, expires)

    def _take_over(self, stale: Holder) -> None:
        """Remove the stale lock, its claim and record, if it still is the one judged."""
        guard = Lock(f"{self.path}.takeover", lifetime=timedelta(seconds=CONTENTION_WAIT_S))
        try:
            guard.lock(timeout=timedelta(seconds=CONTENTION_WAIT_S))
        except TimeOutError:
            return
        try:
            current = self.holder()
            if current and current.claim == stale.claim and current.stale():
                claim = self.folder / Path(stale.claim).name
                for path in (self.path, claim, Path(f"{claim}.json")):
                    path.unlink(missing_ok=True)
        finally:
            guard.unlock(unconditionally=True)

    def _advice(self, holder: Holder) -> str:
        if holder.machine == _machine():
            return (
                f"{holder.describe()}. It is running on this machine: wait for it to finish or "
                f"stop it (kill {holder.pid}), or choose another output folder."
            )
        return (
            f"{holder.describe()}. Wait for it to finish or stop it, or choose another output "
            "folder. If that run is gone (e.g. its machine crashed), its lock is taken over "
            f"once it expires, in {_duration(holder.expires - time.time())}; or delete "
            f"{self.path} once you are sure nothing writes into {self.folder}."
        )

    def _refresh(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                self.lock.refresh()
            except NotLockedError:
                self.lost, holder = True, self.holder()
                sys.stderr.write(
                    f"dmg-domainbed: this process lost its lock of {self.folder} (was it stopped "
                    f"for over {_duration(LIFETIME_S)}?), now held by "
                    f"{holder.describe() if holder else 'nobody'}; results written from now on "
                    "may mix with another run's\n"
                )
                return
