"""The learning-rate schedules of the DMG paper's own runs, as factors of the base rate.

The authors' released configs (prithv1/DMG, ``configs/{PACS,DomainNet}/*.yml``), for update
``t = 0, 1, ...``:

* ``exponential`` (PACS): the network's rate is multiplied by 0.99 after every epoch,
  ``lr_t = lr * 0.99^e(t)`` with ``e(t) = floor(t * B / epoch_examples)`` the epoch update ``t``
  falls in, ``B`` the examples per update (their ``ExponentialLR``, stepped once per epoch);
  the masks' rate stays constant;
* ``inverse`` (DomainNet): every rate, masks included, is ``lr_t = lr * (1 + 1e-4 t)^(-0.75)``
  (their ``InvLR``, stepped after every update);
* ``constant``: DomainBed's own regime.

Each factor is the ``lr_lambda`` of a ``torch.optim.lr_scheduler.LambdaLR``, which the algorithm
steps after each update: DomainBed's ``train.py`` calls nothing but ``update`` and ``predict``.
"""

from __future__ import annotations

from collections.abc import Callable

SCHEDULES = ("constant", "exponential", "inverse")
EXPONENTIAL_GAMMA = 0.99  # LEARNING_RATE_DECAY_RATE of the authors' PACS configs
INVERSE_GAMMA = 1e-4  # InvLR's defaults, used by the authors' DomainNet configs
INVERSE_POWER = 0.75

Factor = Callable[[int], float]


def constant(t: int) -> float:
    return 1.0


def inverse(t: int) -> float:
    """``(1 + 1e-4 t)^(-0.75)``."""
    return (1 + INVERSE_GAMMA * t) ** -INVERSE_POWER


def exponential_per_epoch(examples_per_update: int, epoch_examples: int) -> Factor:
    """``t -> 0.99^floor(t * examples_per_update / epoch_examples)``."""

    def factor(t: int) -> float:
        return EXPONENTIAL_GAMMA ** (t * examples_per_update // epoch_examples)

    return factor


def factors(schedule: str, examples_per_update: int, epoch_examples: int) -> tuple[Factor, Factor]:
    """(network factor, mask factor) of ``schedule``."""
    if schedule == "constant":
        return constant, constant
    if schedule == "exponential":
        return exponential_per_epoch(examples_per_update, epoch_examples), constant
    if schedule == "inverse":
        return inverse, inverse
    raise ValueError(f"schedule must be one of {SCHEDULES}; got {schedule!r}")
