"""One run at a time per output folder, on local disks and on the shared filesystems of clusters.

Two commands writing runs into one folder corrupt each other's results (one deletes the other's
half-written jobs and relaunches them into the same files). A command that writes runs holds a
:class:`FolderLock` on its output folder while it works::

    with FolderLock(output_dir):
        ...  # create, delete or launch jobs

The lock is :mod:`flufl.lock`'s: the file ``FOLDER/.dmg-domainbed.lock``, a hard link to a
claim file, which NFS creates atomically; its modification time is when it expires, and the
holder refreshes it every :data:`REFRESH_S` seconds, :data:`LIFETIME_S` ahead. This module adds
what flufl.lock leaves to its users:

* a record next to the claim file (host, pid, start, command), so that a second command gets a
  :class:`~dmg_domainbed.errors.UserError` naming the holder and how to proceed;
* when a lock is stale: its holder ran on this machine (same host, boot and process
  namespace) and that process is gone, which is known at once (flufl.lock would wait for the
  lifetime); or it ran on another machine and the lock expired. A holder alive here keeps it
  however long it was stopped;
* taking a stale lock over safely: under a second flufl lock, a taker removes the lock only if
  it still is the one it judged stale, so of several takers exactly one wins;
* the refresh, in a daemon thread, which also notices when another process took the lock.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import psutil
from flufl.lock import Lock, NotLockedError, TimeOutError

from dmg_domainbed.errors import UserError

LOCK_NAME = ".dmg-domainbed.lock"
REFRESH_S = 30.0
#: Seconds after its last refresh when a lock whose holder ran on another machine is stale.
LIFETIME_S = 300.0
#: Seconds a contender waits for a concurrent takeover before giving up.
CONTENTION_WAIT_S = 10.0


def _machine() -> str:
    """This host, boot and process namespace: where a pid means the same process."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:  # not Linux: the host name alone
        boot = namespace = "?"
    return f"{socket.gethostname()}/{boot}/{namespace}"


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _remove(*paths: Path) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


@dataclass(frozen=True)
class Holder:
    """A lock as found: its claim (the lock file's content), expiry and its holder's record."""

    claim: str
    expires: float
    host: str = "?"
    machine: str = "?"
    pid: int = 0
    started: float = 0.0
    command: str = "?"

    def here(self) -> bool:
        return self.machine == _machine()

    def stale(self) -> bool:
        if self.here():
            try:  # gone, or its pid now names a process started after it took the lock
                process = psutil.Process(self.pid)
                started_later = process.create_time() > self.started + 1
                return started_later or process.status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return True
        return time.time() > self.expires

    def describe(self) -> str:
        if self.pid == 0:
            return "a run whose record is not readable (it may be starting)"
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return (
            f"`{self.command}` (pid {self.pid} on {self.host}), running since {started} "
            f"({_duration(time.time() - self.started)} ago)"
        )


class FolderLock:
    """Exclusive use of ``folder`` by this process; a context manager (see the module's
    docstring). ``command`` is what a second run is shown (default: this command line)."""

    def __init__(
        self,
        folder: str | os.PathLike,
        command: str | None = None,
        refresh_s: float = REFRESH_S,
        lifetime_s: float = LIFETIME_S,
    ) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.command = command or " ".join(sys.orig_argv)
        self.refresh_s = refresh_s
        self.lock = Lock(str(self.path), lifetime=timedelta(seconds=lifetime_s))
        #: Set when another process took the lock over while this one held it.
        self.lost = False
        self._stop = threading.Event()
        self._refreshing: threading.Thread | None = None

    def __enter__(self) -> FolderLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()

    def acquire(self) -> None:
        """Take the lock, or raise :class:`UserError` naming the run that holds it."""
        deadline = time.monotonic() + CONTENTION_WAIT_S
        while not self._try():
            holder = self.holder()
            late = time.monotonic() > deadline
            # a holder writes its record right after taking the lock: wait for it to name it
            if holder is not None and not holder.stale() and (holder.pid or late):
                raise UserError(f"{self.folder} is in use by another run: {self._advice(holder)}")
            if holder is not None and holder.stale():
                self._take_over(holder)
            if late:
                raise UserError(
                    f"{self.folder}: other processes kept taking its lock for "
                    f"{CONTENTION_WAIT_S:.0f} s; run one command at a time on this folder"
                )
            time.sleep(0.05)
        record = {"host": socket.gethostname(), "machine": _machine(), "pid": os.getpid()}
        record.update(started=time.time(), command=self.command)
        draft = Path(f"{self.lock.claimfile}.draft")
        draft.write_text(json.dumps(record))
        draft.replace(f"{self.lock.claimfile}.json")
        self._stop.clear()
        self._refreshing = threading.Thread(target=self._refresh, name="folder-lock", daemon=True)
        self._refreshing.start()

    def release(self) -> None:
        """Give the lock up (if it is still this process's)."""
        self._stop.set()
        if self._refreshing is not None:
            self._refreshing.join()
        _remove(Path(f"{self.lock.claimfile}.json"))
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

    def _try(self) -> bool:
        """One attempt at flufl.lock's lock: a timeout already past makes it neither wait nor
        break a lock itself (breaking is :meth:`_take_over`'s)."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.lock.lock(timeout=-1)
        except TimeOutError:
            return False
        except OSError as error:
            raise UserError(
                f"cannot write into {self.folder}: {error.strerror} ({error.filename}); "
                "choose another output folder"
            ) from None
        return True

    def _take_over(self, stale: Holder) -> None:
        """Remove the stale lock, its claim file and record, if it still is the one judged."""
        guard = Lock(f"{self.path}.takeover", lifetime=timedelta(seconds=CONTENTION_WAIT_S))
        try:
            guard.lock(timeout=int(CONTENTION_WAIT_S))
        except TimeOutError:
            return
        try:
            current = self.holder()
            if current is not None and current.claim == stale.claim and current.stale():
                claim = self.folder / Path(stale.claim).name
                _remove(self.path, claim, Path(f"{claim}.json"))
        finally:
            guard.unlock(unconditionally=True)

    def _advice(self, holder: Holder) -> str:
        if holder.here():
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
        """Push the expiry ahead until released; stop if another process took the lock."""
        while not self._stop.wait(self.refresh_s):
            try:
                self.lock.refresh()
            except NotLockedError:
                self.lost = True
                holder = self.holder()
                sys.stderr.write(
                    f"dmg-domainbed: this process lost its lock of {self.folder} (was it stopped "
                    f"for over {_duration(self.lock.lifetime.total_seconds())}?), now held by "
                    f"{'nobody' if holder is None else holder.describe()}; results written from "
                    "now on may mix with another run's\n"
                )
                return
