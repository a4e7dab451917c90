"""The hparams a DomainBed job trains with, by ``train.py``'s rule: hparams seed 0 takes the
registry's defaults, any other seed the random search's draw, seeded with
``misc.seed_hash(hparams_seed, trial_seed)``; either is then updated with the job's fixed
``--hparams``. Every part of the package that asks what a job trains with asks here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def job_hparams(
    algorithm: str,
    dataset: str,
    hparams_seed: int,
    trial_seed: int,
    fixed: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The hparams ``train.py`` builds for a job of ``algorithm`` on ``dataset`` with these seeds
    and the fixed hparams ``fixed`` (its ``--hparams``)."""
    from domainbed import hparams_registry
    from domainbed.lib import misc

    if hparams_seed == 0:
        hparams = hparams_registry.default_hparams(algorithm, dataset)
    else:
        seed = misc.seed_hash(hparams_seed, trial_seed)
        hparams = hparams_registry.random_hparams(algorithm, dataset, seed)
    hparams.update(fixed or {})
    return hparams
