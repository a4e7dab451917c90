"""DomainBed's ``train.py``, unmodified, run as ``__main__`` with a clock on its phases.

``python -m dmg_domainbed.smoke.clock TIMES_FILE TRAIN_ARGS...`` runs ``domainbed.scripts.train``
with ``TRAIN_ARGS`` and writes to ``TIMES_FILE`` (JSON) the ``time.time()`` of: each training
step's first request for a batch (``steps``: train.py's step clock starts just before it, so
loading is part of the step, as in its ``step_time``); each ``misc.accuracy`` call's ``[start,
end, images]`` (``evaluations``: every split at each checkpoint); this module's start
(``clock``: the interpreter started), train.py's first hparams lookup (``hparams``: its imports
done) and algorithm lookup (``network``: its data and loaders made). Nothing train.py computes
changes: the clock wraps the first training loader's iterator and ``misc.accuracy``.
"""

from __future__ import annotations

import json
import runpy
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

# What train.py imports, imported with this module: a warm job's fork server
# (launchers.local_parallel) preloads the module it runs, so that its jobs start with them.
import domainbed.scripts.train  # noqa: F401


@dataclass(frozen=True)
class Phases:
    """Seconds of one job: process start to the first step, each step (evaluations left out),
    each checkpoint's evaluation (its splits summed) with its images, the last evaluation's end
    to the process's exit."""

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
    checkpoints: dict = {}  # the step each checkpoint follows: (seconds, images) of its calls
    for start, end, images in evaluations:
        step = max((s for s in steps if s <= start), default=None)
        seconds, count = checkpoints.get(step, (0.0, 0))
        checkpoints[step] = (seconds + end - start, count + int(images))
    seconds, images = zip(*checkpoints.values())
    return Phases(steps[0] - started, tuple(durations), seconds, images, ended - evaluations[-1][1])


# A job's wall time in the order it is spent; the first four are its start-up.
BREAKDOWN = (
    "launch",  # started to this module running: a new interpreter, or a fork of a warm server
    "imports",  # train.py's imports (torch, DomainBed, the plugins) and argument parsing
    "data",  # the dataset, its splits and loaders (their worker processes started)
    "network",  # the algorithm built and moved to the device, step 0's batch awaited
    "first_step",  # step 0 (on a GPU: kernels chosen, memory pooled)
    "steps",  # every other step, evaluations left out
    "evaluation",  # every checkpoint's evaluation
    "end",  # the last evaluation's end to the process's exit (model saved, interpreter ends)
)


def breakdown(started: float, ended: float, marks: dict) -> dict[str, float]:
    """Seconds of each phase of :data:`BREAKDOWN` of a job started at ``started`` and ended at
    ``ended`` (by its launcher's clock); they add up to its wall time."""
    timed = phases(started, ended, marks)
    bounds = [started, marks["clock"], marks["hparams"], marks["network"]]
    bounds.append(marks["steps"][0])
    start = [later - earlier for earlier, later in zip(bounds, bounds[1:])]
    # step 0 ends where step 1 begins; the evaluation after it is counted with the others
    rest = (timed.steps[0], sum(timed.steps[1:]), sum(timed.evaluations), timed.end)
    return dict(zip(BREAKDOWN, (*start, *rest), strict=True))


def _marked(function, marks: dict, name: str):
    """``function``, marking the time of its first call as ``marks[name]``."""

    def marking(*args, **kwargs):
        marks.setdefault(name, time.time())
        return function(*args, **kwargs)

    return marking


def _counted(loader, counter: list[int]):
    for x, y in loader:
        counter[0] += len(x)
        yield x, y


def main(argv: Sequence[str]) -> None:
    marks: dict = {"clock": time.time(), "steps": [], "evaluations": []}
    times_file, *train_args = argv
    from domainbed import algorithms, hparams_registry
    from domainbed.lib import fast_data_loader, misc

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
    for name in ("default_hparams", "random_hparams"):
        setattr(hparams_registry, name, _marked(getattr(hparams_registry, name), marks, "hparams"))
    algorithms.get_algorithm_class = _marked(algorithms.get_algorithm_class, marks, "network")
    sys.argv = ["domainbed.scripts.train", *train_args]
    sys.modules.pop("domainbed.scripts.train", None)  # imported above: run afresh as __main__
    try:
        runpy.run_module("domainbed.scripts.train", run_name="__main__", alter_sys=True)
    finally:
        with open(times_file, "w") as stream:
            json.dump(marks, stream)


if __name__ == "__main__":
    main(sys.argv[1:])
