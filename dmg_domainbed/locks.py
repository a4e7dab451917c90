"""One run at a time per output folder, on local disks and on the shared filesystems of clusters.

Two commands writing runs into the same folder corrupt each other's results (one deletes the
other's half-written jobs and relaunches them into the same files). A command that writes runs
holds a :class:`FolderLock` on its output folder for as long as it works::

    with FolderLock(output_dir):
        ...  # create, delete or launch jobs

A second command on the same folder, from this machine or any other that mounts it, gets a
:class:`~dmg_domainbed.errors.UserError` that names the holder (command, pid, host, start time,
last sign of life) and how to proceed.

The lock is the directory ``FOLDER/.dmg-domainbed.lock`` holding ``owner.json``: a random token,
host name, an identity of the machine and its process namespace, pid, the process's start time,
the lock's start time and the command. It relies only on operations that NFS and Lustre perform
atomically on the server: a directory rename onto a name that does not exist. The record is
written into a private directory first, which is then renamed to the lock's name, so the lock
appears complete or not at all; a rename onto an existing (non-empty) lock fails. POSIX
``fcntl``/``flock`` locks are not used: on NFS they depend on lock daemons and mount options.

While the lock is held, a daemon thread refreshes the record's modification time every
:data:`HEARTBEAT_S` seconds (and checks that the lock is still its own). A lock is stale when

* its holder ran on this machine (same host, boot and process namespace) and that process is
  gone (no such pid, or the pid now belongs to a process that started at another time); a
  holder still running here is never stale, however old its heartbeat: a stopped process may
  resume; or
* its holder ran on another machine and its heartbeat is older than :data:`STALE_AFTER_S`
  seconds (that machine crashed or lost the folder). The clocks of the machines sharing the
  folder must agree to well within that; it is far above the heartbeat period because NFS
  clients may cache file times for up to a minute.

A stale lock is taken over safely. Takers are serialised by a second directory,
``.dmg-domainbed.lock.takeover``, created with ``mkdir`` (atomic on those filesystems too);
under it, a taker re-reads the record and moves the lock aside only if it is still the stale
one it judged. Then every contender tries the same atomic rename: exactly one wins. A taker that
dies inside that short section leaves the takeover directory behind; it is broken once it is
older than :data:`STALE_AFTER_S`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from dmg_domainbed.errors import UserError

LOCK_NAME = ".dmg-domainbed.lock"
OWNER_FILE = "owner.json"
#: Seconds between two refreshes of a held lock's heartbeat.
HEARTBEAT_S = 30.0
#: Seconds without a heartbeat after which a lock counts as abandoned, whoever held it.
STALE_AFTER_S = 300.0
#: Seconds a contender waits for a concurrent takeover before giving up.
CONTENTION_WAIT_S = 10.0


def _process_start(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot (Linux), or ``None``."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # the command name (field 2) may hold spaces and parentheses: split after it
            return stat.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


def _machine() -> str:
    """This host, boot and process namespace: where a pid means the same process."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:  # not Linux: the host name alone
        boot = namespace = "?"
    return f"{socket.gethostname()}/{boot}/{namespace}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    return True


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass(frozen=True)
class Holder:
    """Who holds a lock, as its record says; ``heartbeat``: the record's modification time."""

    token: str | None
    host: str = "?"
    machine: str = "?"
    pid: int = 0
    process_start: str | None = None
    started: float = 0.0
    command: str = "?"
    heartbeat: float = 0.0

    def here(self) -> bool:
        """Whether the holder ran on this machine, in this process namespace."""
        return self.token is not None and self.machine == _machine()

    def stale(self, stale_after_s: float) -> bool:
        if self.here():
            if not _alive(self.pid):
                return True
            now = _process_start(self.pid)
            if self.process_start is not None and now is not None:
                # alive and still that process: never stale, however old its heartbeat (a
                # stopped process may resume); another process with the pid: stale
                return now != self.process_start
        return time.time() - self.heartbeat > stale_after_s

    def describe(self) -> str:
        if self.token is None:
            return "a lock without a readable owner record"
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return (
            f"`{self.command}` (pid {self.pid} on {self.host}), running since {started} "
            f"({_duration(time.time() - self.started)} ago), last heartbeat "
            f"{_duration(time.time() - self.heartbeat)} ago"
        )


class FolderLock:
    """Exclusive use of ``folder`` by this process; a context manager (see the module's
    docstring). ``command`` is what the record shows to a second run (default: this process's
    command line)."""

    def __init__(
        self,
        folder: str | os.PathLike,
        command: str | None = None,
        heartbeat_s: float = HEARTBEAT_S,
        stale_after_s: float = STALE_AFTER_S,
    ) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.command = command or " ".join(sys.orig_argv)
        self.heartbeat_s = heartbeat_s
        self.stale_after_s = stale_after_s
        #: Set when another process took the lock over while this one held it.
        self.lost = False
        self._token = os.urandom(16).hex()
        self._stop = threading.Event()
        self._beating: threading.Thread | None = None

    def __enter__(self) -> FolderLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()

    def acquire(self) -> None:
        """Take the lock, or raise :class:`UserError` naming the run that holds it."""
        self._stop.clear()
        deadline = time.monotonic() + CONTENTION_WAIT_S
        while not self._create():
            holder = self._holder()
            if holder is not None and not holder.stale(self.stale_after_s):
                raise UserError(f"{self.folder} is in use by another run: {self._advice(holder)}")
            if holder is not None and self._take_over(holder):
                continue
            if time.monotonic() > deadline:
                raise UserError(
                    f"{self.folder}: other processes kept taking its lock for "
                    f"{CONTENTION_WAIT_S:.0f} s; run one command at a time on this folder"
                )
            time.sleep(0.05)
        self._beating = threading.Thread(target=self._beat, name="folder-lock", daemon=True)
        self._beating.start()

    def release(self) -> None:
        """Give the lock up (if it is still this process's)."""
        self._stop.set()
        if self._beating is not None:
            self._beating.join()
        holder = self._holder()
        if holder is not None and holder.token == self._token:
            self._discard(self.path, "released")

    def _advice(self, holder: Holder) -> str:
        if holder.here():
            return (
                f"{holder.describe()}. It is running on this machine: wait for it to finish or "
                f"stop it (kill {holder.pid}), or choose another output folder."
            )
        return (
            f"{holder.describe()}. Wait for it to finish or stop it, or choose another output "
            f"folder. If that run is gone (e.g. its machine crashed), its lock is taken over "
            f"{_duration(self.stale_after_s)} after its last heartbeat; or delete {self.path} "
            f"once you are sure nothing writes into {self.folder}."
        )

    def _create(self) -> bool:
        """Try to create the lock with this process's record in one rename."""
        draft = self.folder / f"{LOCK_NAME}.{self._token}.new"
        try:
            draft.mkdir(parents=True)
        except OSError as error:
            raise UserError(
                f"cannot write into {self.folder}: {error.strerror} ({error.filename}); "
                "choose another output folder"
            ) from None
        record = {
            "token": self._token,
            "host": socket.gethostname(),
            "machine": _machine(),
            "pid": os.getpid(),
            "process_start": _process_start(os.getpid()),
            "started": time.time(),
            "command": self.command,
        }
        with open(draft / OWNER_FILE, "w") as out:
            json.dump(record, out)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.rename(draft, self.path)
            return True
        except OSError as error:
            if error.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
                raise
            shutil.rmtree(draft, ignore_errors=True)
        # NFS may answer a retransmitted rename with an error although the first one succeeded
        holder = self._holder()
        return holder is not None and holder.token == self._token

    def _holder(self) -> Holder | None:
        """The lock's holder; ``None`` when there is no lock."""
        try:
            with open(self.path / OWNER_FILE) as record:  # opening refreshes cached file times
                heartbeat = os.fstat(record.fileno()).st_mtime
                return Holder(**json.load(record), heartbeat=heartbeat)
        except (OSError, ValueError, TypeError):
            pass  # no lock, or not one this package wrote: judged by its age below
        try:
            return Holder(token=None, heartbeat=self.path.stat().st_mtime)
        except FileNotFoundError:
            return None

    def _take_over(self, stale: Holder) -> bool:
        """Move the stale lock aside if it still is the one judged; ``False`` when another
        process is taking it over."""
        guard = self.path.with_name(f"{LOCK_NAME}.takeover")
        try:
            guard.mkdir()
        except FileExistsError:
            try:
                abandoned = time.time() - guard.stat().st_mtime > self.stale_after_s
            except FileNotFoundError:
                return True
            if abandoned:
                self._discard(guard, "abandoned")
                return True
            return False
        try:
            current = self._holder()
            if (
                current is not None
                and current.token == stale.token
                and current.stale(self.stale_after_s)
            ):
                self._discard(self.path, "stale")
        finally:
            with contextlib.suppress(FileNotFoundError):
                guard.rmdir()
        return True

    def _discard(self, path: Path, why: str) -> None:
        """Remove ``path`` atomically from its name, then delete it."""
        aside = path.with_name(f"{path.name}.{self._token}.{why}")
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return
        if aside.is_dir():
            shutil.rmtree(aside, ignore_errors=True)
        else:
            aside.unlink()

    def _beat(self) -> None:
        """Refresh the heartbeat until released; stop if another process took the lock."""
        while not self._stop.wait(self.heartbeat_s):
            holder = self._holder()
            if holder is None or holder.token != self._token:
                self.lost = True
                now = "nobody" if holder is None else holder.describe()
                sys.stderr.write(
                    f"dmg-domainbed: this process lost its lock of {self.folder} (was it stopped "
                    f"for over {_duration(self.stale_after_s)}?), now held by {now}; results "
                    "written from now on may mix with another run's\n"
                )
                return
            try:
                os.utime(self.path / OWNER_FILE)
            except FileNotFoundError:
                continue
