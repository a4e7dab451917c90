"""Can every domain's training split fill one batch? If not, DomainBed's job hangs.

The rule, and why a short split hangs, is :mod:`dmg_domainbed.datasets.training_split`'s;
here it is applied to the batches a run or a sweep trains with.

A single run trains with its hparams' ``batch_size``; a sweep asks with the largest batch its
jobs train with (its plan draws them: :func:`dmg_domainbed.sweep.plan.draws`), as every domain
trains in some job of a sweep. A manifest dataset applies the same rule when ``train.py``
builds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dmg_domainbed.datasets.findings import DatasetReport
from dmg_domainbed.datasets.layouts import MNIST_DATASETS
from dmg_domainbed.datasets.training_split import (
    HOLDOUT_FRACTION,
    batch_findings,
    training_examples,
)


@dataclass(frozen=True)
class Batch:
    """The batch a run trains with: ``size``, else (``None``) DomainBed's default on the
    dataset; ``source`` says where it comes from."""

    size: int | None = None
    holdout_fraction: float = HOLDOUT_FRACTION
    source: str = "DomainBed's default batch_size"

    def size_on(self, dataset: str) -> int:
        return self.size if self.size is not None else default_batch_size(dataset)


# A run without --hparams and with train.py's default holdout_fraction.
DEFAULT_BATCH = Batch()


def default_batch_size(dataset: str) -> int:
    """The batch of a run of ``dataset`` without ``--hparams`` (DomainBed's default for ERM)."""
    from domainbed import hparams_registry

    return hparams_registry.default_hparams("ERM", dataset)["batch_size"]


def domain_examples(report: DatasetReport, environments: Sequence[str]) -> list[tuple[str, int]]:
    """(domain, examples) of each domain DomainBed builds from the files the report counted.
    MNIST's two files are pooled and dealt out to the domains in turn."""
    if report.dataset in MNIST_DATASETS:
        total = sum(count.images for count in report.counts)
        return [(name, total // len(environments)) for name in environments]
    return [(count.domain, count.images) for count in report.counts]


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
