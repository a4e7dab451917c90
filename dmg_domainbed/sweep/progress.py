"""Reports sweep jobs as they finish, by watching DomainBed's ``done`` files.

Works with any launcher (DomainBed's own ``local`` included), since every train.py run writes
``done`` into its folder as its last act.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from dmg_domainbed.reporting.runs import DONE_FILE


def is_done(job) -> bool:
    """Whether a DomainBed ``Job`` has finished (its ``done`` file exists)."""
    return (Path(job.output_dir) / DONE_FILE).exists()


class DoneWatcher:
    """A background thread that calls ``report(line)`` each time a job of ``jobs`` (DomainBed
    ``Job`` objects) finishes; ``describe(job)`` names it in the line.

    Jobs already done when watching starts are counted but not reported again.
    """

    def __init__(
        self,
        jobs: Sequence,
        report: Callable[[str], None],
        describe: Callable[[object], str],
        interval: float = 1.0,
    ) -> None:
        self.jobs = list(jobs)
        self.report = report
        self.describe = describe
        self.interval = interval
        self._pending = [job for job in self.jobs if not is_done(job)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._start = time.monotonic()

    @property
    def finished(self) -> int:
        return len(self.jobs) - len(self._pending)

    def __enter__(self) -> DoneWatcher:
        self._start = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()
        self._check()

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            self._check()

    def _check(self) -> None:
        for job in [job for job in self._pending if is_done(job)]:
            self._pending.remove(job)
            elapsed = time.monotonic() - self._start
            self.report(
                f"[{self.finished}/{len(self.jobs)}] done: {self.describe(job)} ({elapsed:.0f} s)"
            )
