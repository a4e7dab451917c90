"""Can every domain's training split fill one batch? If not, DomainBed's job hangs.

DomainBed's ``train.py`` holds out ``int(n * holdout_fraction)`` of a domain's ``n`` examples
(``misc.split_dataset``) and trains on the other ``n - int(n * holdout_fraction)``, drawn by its
``InfiniteDataLoader``: a ``RandomSampler`` with replacement that draws as many indices per
pass as the split holds, cut into batches of ``batch_size`` with ``drop_last=True``. A split
smaller than one batch yields no batch in a pass, and the loader's infinite sampler starts the
next pass for ever: the job hangs before its first step, without an error. (With the hparam
``class_balanced`` a ``WeightedRandomSampler`` draws ``batch_size`` indices per pass instead;
it is off in DomainBed's defaults and its random search.)

A single run trains with its hparams' ``batch_size``; a sweep's job with ``hparams_seed`` 0
with DomainBed's defaults, any other with ``random_hparams(algorithm, dataset,
seed_hash(hparams_seed, trial_seed))`` (its random search draws up to 45 on image datasets),
both updated with the fixed ``--hparams``; every domain trains in some job of a sweep. A
manifest dataset applies the same rule when ``train.py`` builds it
(:func:`training_holdout_fraction`).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmg_domainbed.datacheck.findings import ERROR, DatasetReport, Finding
from dmg_domainbed.datasets.layouts import MNIST_DATASETS

# train.py's default --holdout_fraction.
HOLDOUT_FRACTION = 0.2
# DomainBed's training script, as a module and as the last parts of its path.
TRAIN_MODULE = "domainbed.scripts.train"
TRAIN_SCRIPT = ("domainbed", "scripts", "train.py")


@dataclass(frozen=True)
class Batch:
    """The batch a run trains with: ``size``, or, when ``None``, what ``draw`` returns (asked
    only when a dataset's files are there to compare with), else DomainBed's default on the
    dataset; ``source`` says where it comes from."""

    size: int | None = None
    holdout_fraction: float = HOLDOUT_FRACTION
    source: str = "DomainBed's default batch_size"
    draw: Callable[[], int] | None = None

    def size_on(self, dataset: str) -> int:
        if self.size is not None:
            return self.size
        return self.draw() if self.draw is not None else default_batch_size(dataset)


# A run without --hparams and with train.py's default holdout_fraction.
DEFAULT_BATCH = Batch()


def training_examples(examples: int, holdout_fraction: float) -> int:
    """The examples of a domain that ``train.py`` trains on (``misc.split_dataset``)."""
    return examples - int(examples * holdout_fraction)


def examples_needed(batch_size: int, holdout_fraction: float) -> int:
    """The fewest examples of a domain whose training split fills one batch."""
    examples = batch_size
    while training_examples(examples, holdout_fraction) < batch_size:
        examples += 1
    return examples


def default_batch_size(dataset: str) -> int:
    """The batch of a run of ``dataset`` without ``--hparams`` (DomainBed's default for ERM)."""
    from domainbed import hparams_registry

    return hparams_registry.default_hparams("ERM", dataset)["batch_size"]


def largest_drawn_batch(
    algorithm: str, dataset: str, hparams_seeds: Sequence[int], trials: int
) -> int:
    """The largest ``batch_size`` among the hparams that ``train.py`` draws for these seeds."""
    from domainbed import hparams_registry
    from domainbed.lib import misc

    drawn = [
        hparams_registry.random_hparams(algorithm, dataset, misc.seed_hash(hparams_seed, trial))
        for hparams_seed in hparams_seeds
        if hparams_seed != 0  # hparams_seed 0: DomainBed's defaults, whatever the trial
        for trial in range(trials)
    ]
    if 0 in hparams_seeds:
        drawn.append(hparams_registry.default_hparams(algorithm, dataset))
    return max(hparams["batch_size"] for hparams in drawn)


def sweep_batch(
    algorithm: str,
    dataset: str,
    fixed: Mapping[str, Any],
    hparams_seeds: Sequence[int],
    trials: int,
    holdout_fraction: float,
) -> Batch:
    """The largest batch among a sweep's jobs of ``algorithm`` on ``dataset``: the one its
    hparams fix, or the largest that the jobs' ``train.py`` draw (drawn when first needed)."""
    if "batch_size" in fixed:
        return Batch(fixed["batch_size"], holdout_fraction, "fixed by the sweep's hparams")
    source = f"the largest that the sweep's jobs of {algorithm} draw"
    draw = functools.partial(largest_drawn_batch, algorithm, dataset, hparams_seeds, trials)
    return Batch(None, holdout_fraction, source, draw)


def domain_examples(report: DatasetReport, environments: Sequence[str]) -> list[tuple[str, int]]:
    """(domain, examples) of each domain DomainBed builds from the files the report counted.
    MNIST's two files are pooled and dealt out to the domains in turn."""
    if report.dataset in MNIST_DATASETS:
        total = sum(count.images for count in report.counts)
        return [(name, total // len(environments)) for name in environments]
    return [(count.domain, count.images) for count in report.counts]


def batch_findings(
    dataset: str,
    examples: Sequence[tuple[str, int]],
    batch_size: int,
    holdout_fraction: float,
    source: str,
) -> list[Finding]:
    """An error for each domain of ``examples`` (domain, examples) of ``dataset`` whose training
    split cannot fill a batch of ``batch_size`` (``source`` says where that size comes from)."""
    short = [(d, n) for d, n in examples if 0 < training_examples(n, holdout_fraction) < batch_size]
    if not short:
        return []
    fits = min(training_examples(n, holdout_fraction) for _, n in short)
    findings = []
    for domain, n in short:
        held_out = n - training_examples(n, holdout_fraction)
        findings.append(
            Finding(
                ERROR,
                f"domain {domain!r} of {dataset} trains on {n - held_out:,} images ({n:,} "
                f"less {held_out:,} held out, holdout_fraction {holdout_fraction:g}): fewer "
                f"than one batch of {batch_size} ({source})",
                "a training split of at least one batch in every domain: DomainBed's training "
                "loader drops an incomplete batch, and its infinite sampler then waits for "
                "ever: the job hangs before its first step, without an error",
                f'lower the hparam batch_size to at most {fits} (--hparams \'{{"batch_size": '
                f"{fits}}}', or batch_size in the sweep file's [sweep.hparams]), or give the "
                f"domain at least {examples_needed(batch_size, holdout_fraction):,} images",
            )
        )
    return findings


def add_batch_findings(
    report: DatasetReport, examples: Sequence[tuple[str, int]], batch: Batch
) -> None:
    """An error for each domain of ``examples`` (domain, examples) whose training split cannot
    fill ``batch``."""
    holdout_fraction = batch.holdout_fraction
    if not any(training_examples(n, holdout_fraction) for _, n in examples):
        return  # no images: other findings say so
    batch_size = batch.size_on(report.dataset)
    report.findings += batch_findings(
        report.dataset, examples, batch_size, holdout_fraction, batch.source
    )


def training_holdout_fraction() -> float | None:
    """The ``--holdout_fraction`` of DomainBed's ``train.py`` when this process runs it, else
    ``None``. DomainBed builds a dataset with its hparams only; ``train.py`` keeps its parsed
    arguments in its module's global ``args``, and runs as ``__main__`` (``python -m``, a
    script path, or ``runpy`` as local_parallel's warm jobs run it)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None:
        is_train = spec.name == TRAIN_MODULE
    else:
        is_train = Path(getattr(main, "__file__", None) or "").parts[-3:] == TRAIN_SCRIPT
    fraction = getattr(getattr(main, "args", None), "holdout_fraction", None)
    return float(fraction) if is_train and isinstance(fraction, int | float) else None
