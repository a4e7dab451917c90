"""DomainBed's ``train.py``, unmodified, run as ``__main__`` with a clock on its phases.

``python -m dmg_domainbed.smoke.clock TIMES_FILE TRAIN_ARGS...`` runs ``domainbed.scripts.train``
with ``TRAIN_ARGS`` as its own command line would, and writes to ``TIMES_FILE`` (JSON) when each
phase began and ended, in ``time.time()`` seconds:

- ``steps``: when each training step asked its first source domain for a batch (``train.py``
  starts its step clock just before it: the data loading is part of the step, as in its
  ``step_time``);
- ``evaluations``: ``[start, end, images]`` of each of ``misc.accuracy``'s calls (one per split
  of every domain at each checkpoint).

Nothing ``train.py`` computes changes: the clock wraps the first training loader's iterator and
``misc.accuracy``, and reads the time. :func:`phases` turns the marks into the seconds
:mod:`dmg_domainbed.smoke.run` reports: start-up, every step, and each checkpoint's evaluation.
"""

from __future__ import annotations

import json
import runpy
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Phases:
    """Seconds of one job: ``start`` (process start to the first step), ``steps`` (each step,
    evaluations left out), ``evaluations`` (each checkpoint's, summed over its splits) and the
    ``images`` each evaluated, ``end`` (the last evaluation to the process's exit: the model
    saved, the interpreter ending)."""

    start: float
    steps: tuple[float, ...]
    evaluations: tuple[float, ...]
    images: tuple[int, ...]
    end: float

    def step_median(self, warmup: int) -> float:
        """The median step after the first ``warmup`` steps (all of them when none is left)."""
        return statistics.median(self.steps[warmup:] or self.steps)

    def eval_seconds_per_image(self) -> float:
        """The last checkpoint's evaluation (its loaders' workers already started) per image."""
        return self.evaluations[-1] / self.images[-1]


def phases(started: float, ended: float, marks: dict) -> Phases:
    """The :class:`Phases` of a job started at ``started`` and ended at ``ended`` from the
    ``marks`` its clock wrote. A step's time runs from its mark to the next step's (or to the
    last evaluation's start), less the evaluations in between."""
    steps, evaluations = marks["steps"], marks["evaluations"]
    if not steps or not evaluations:
        raise ValueError("the job ended before its first step and evaluation")
    last = min(start for start, _, _ in evaluations if start >= steps[-1])
    ends = [*steps[1:], last]
    durations = []
    for begin, end in zip(steps, ends, strict=True):
        evaluating = sum(e - s for s, e, _ in evaluations if begin <= s < end)
        durations.append(end - begin - evaluating)
    checkpoints: list[list[float]] = []  # [seconds, images] of the calls after each step
    last_step = None
    for start, end, images in evaluations:
        step = max((s for s in steps if s <= start), default=None)
        if step != last_step or not checkpoints:
            checkpoints.append([0.0, 0])
            last_step = step
        checkpoints[-1][0] += end - start
        checkpoints[-1][1] += images
    return Phases(
        start=steps[0] - started,
        steps=tuple(durations),
        evaluations=tuple(seconds for seconds, _ in checkpoints),
        images=tuple(int(images) for _, images in checkpoints),
        end=ended - evaluations[-1][1],
    )


def _counted(loader, counter: list[int]):
    for x, y in loader:
        counter[0] += len(x)
        yield x, y


def main(argv: Sequence[str]) -> None:
    times_file, *train_args = argv
    from domainbed.lib import fast_data_loader, misc

    marks: dict[str, list] = {"steps": [], "evaluations": []}
    first_loader: list = []
    iterate, accuracy = fast_data_loader.InfiniteDataLoader.__iter__, misc.accuracy

    def timed_iter(loader):
        if not first_loader:
            first_loader.append(loader)
        batches = iterate(loader)
        while True:
            if loader is first_loader[0]:
                marks["steps"].append(time.time())
            yield next(batches)

    def timed_accuracy(network, loader, weights, device):
        images, start = [0], time.time()
        result = accuracy(network, _counted(loader, images), weights, device)
        marks["evaluations"].append([start, time.time(), images[0]])
        return result

    fast_data_loader.InfiniteDataLoader.__iter__ = timed_iter
    misc.accuracy = timed_accuracy
    sys.argv = ["domainbed.scripts.train", *train_args]
    try:
        runpy.run_module("domainbed.scripts.train", run_name="__main__", alter_sys=True)
    finally:
        with open(times_file, "w") as stream:
            json.dump(marks, stream)


if __name__ == "__main__":
    main(sys.argv[1:])
