"""The hparams this package gives every algorithm, DomainBed's and each plugin's, on every dataset.

They are known to the names rule (:mod:`.names`) and checked by their own rule, as any declared
hparam, but kept out of DomainBed's registry: a run that gives none has exactly DomainBed's
hparams, results and checkpoints. :mod:`dmg_domainbed.precision` applies ``precision``.
"""

from dmg_domainbed.hparams.space import HParam, HParamSpace

PRECISION = "precision"
FP32 = "fp32"
BF16 = "bf16"
PRECISIONS = (FP32, BF16)
EVERY_ALGORITHM = HParamSpace(
    # The sampler is never called by DomainBed's random search (not in its registry): fp32.
    HParam(PRECISION, FP32, lambda random: FP32, choices=PRECISIONS)
)
