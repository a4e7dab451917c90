"""Reports sweep jobs as they finish, by watching DomainBed's ``done`` files.

Works with any launcher (DomainBed's own ``local`` included), since every train.py run writes
``done`` into its folder as its last act.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from dmg_domainbed.reporting.runs import DONE_FILE


def is_done(job) -> bool:
    """Whether a DomainBed ``Job`` has finished (its ``done`` file exists)."""
    return (Path(job.output_dir) / DONE_FILE).exists()


@contextlib.contextmanager
def watch_done(
    jobs: Sequence, report: Callable[[str], None], describe: Callable, interval: float = 1.0
) -> Iterator[None]:
    """While inside, a daemon thread calls ``report(line)`` each time one of ``jobs`` (DomainBed
    ``Job`` objects, named by ``describe(job)``) finishes, and once more on leaving. Jobs done
    before are counted but not reported."""
    pending = [job for job in jobs if not is_done(job)]
    start, stop = time.monotonic(), threading.Event()

    def check() -> None:
        for job in [job for job in pending if is_done(job)]:
            pending.remove(job)
            finished = f"{len(jobs) - len(pending)}/{len(jobs)}"
            report(f"[{finished}] done: {describe(job)} ({time.monotonic() - start:.0f} s)")

    def watch() -> None:
        while not stop.wait(interval):
            check()

    thread = threading.Thread(target=watch, name="done-watcher", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        check()
