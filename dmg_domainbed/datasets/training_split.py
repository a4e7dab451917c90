"""How DomainBed's ``train.py`` splits a domain, and the rule that its training split must fill
one batch.

``train.py`` trains on ``n - int(n * holdout_fraction)`` of a domain's ``n`` examples
(``misc.split_dataset``), drawn by an ``InfiniteDataLoader`` with ``drop_last=True``: a split
smaller than one batch yields no batch, and the job hangs before its first step without an
error (unless ``class_balanced``, off in DomainBed's defaults and search, draws whole batches).
The data check and the sweep's checks apply the rule to the files; a manifest dataset applies
it when ``train.py`` builds it (the ``--holdout_fraction`` of :func:`train_arguments`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from dmg_domainbed.datasets.findings import ERROR, Finding

# train.py's default --holdout_fraction.
HOLDOUT_FRACTION = 0.2
# DomainBed's training script, as a module and as the last parts of its path.
TRAIN_MODULE = "domainbed.scripts.train"
TRAIN_SCRIPT = ("domainbed", "scripts", "train.py")


def training_examples(examples: int, holdout_fraction: float) -> int:
    """The examples of a domain that ``train.py`` trains on (``misc.split_dataset``)."""
    return examples - int(examples * holdout_fraction)


def examples_needed(batch_size: int, holdout_fraction: float) -> int:
    """The fewest examples of a domain whose training split fills one batch."""
    examples = batch_size
    while training_examples(examples, holdout_fraction) < batch_size:
        examples += 1
    return examples


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
    findings = [
        Finding(
            ERROR,
            f"domain {domain!r} of {dataset} trains on {training_examples(n, holdout_fraction):,} "
            f"images ({n:,} less {n - training_examples(n, holdout_fraction):,} held out, "
            f"holdout_fraction {holdout_fraction:g}): fewer than one batch of {batch_size} "
            f"({source})",
        )
        for domain, n in short
    ]
    if not short:
        return []
    # Why and how to fix it once, after the last domain: the same for every one.
    fits = min(training_examples(n, holdout_fraction) for _, n in short)
    each = "the domain" if len(short) == 1 else "each of these domains"
    findings[-1] = replace(
        findings[-1],
        expected="a training split of at least one batch in every domain: DomainBed's training "
        "loader drops an incomplete batch, and its infinite sampler then waits for "
        "ever: the job hangs before its first step, without an error",
        fix=f'lower the hparam batch_size to at most {fits} (--hparams \'{{"batch_size": '
        f"{fits}}}', or batch_size in the sweep file's [sweep.hparams]), or give {each} at "
        f"least {examples_needed(batch_size, holdout_fraction):,} images",
    )
    return findings


def train_arguments():
    """The arguments of DomainBed's ``train.py`` as it parsed them, when this process runs it
    (else ``None``): ``train.py`` keeps them in its module's global ``args`` and runs as
    ``__main__`` (``python -m``, a script path, or ``runpy`` as local_parallel's warm jobs and
    ``smoke`` run it). DomainBed builds a dataset and an algorithm with the hparams only."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None:
        is_train = spec.name == TRAIN_MODULE
    else:
        is_train = Path(getattr(main, "__file__", None) or "").parts[-3:] == TRAIN_SCRIPT
    return getattr(main, "args", None) if is_train else None
