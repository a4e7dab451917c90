"""The learning-rate schedules of the DMG paper's own runs, applied from inside ``update``.

DomainBed's ``train.py`` trains at a constant learning rate and calls nothing but ``update``
and ``predict``, so an algorithm that follows the authors' protocol sets its optimisers'
learning rates itself, before each update. The authors' released configs (prithv1/DMG,
``configs/{PACS,DomainNet}/*.yml``):

* ``exponential`` (PACS): the network's learning rate is multiplied by 0.99 after every epoch,
  ``lr_e = lr * 0.99^e`` during epoch ``e = 0, 1, ...`` (``ExponentialLR`` stepped once per
  epoch); the masks' stays constant;
* ``inverse`` (DomainNet): every optimiser, masks included, at
  ``lr_t = lr * (1 + 1e-4 t)^(-0.75)`` for the ``t``-th update, ``t = 0, 1, ...`` (their
  ``InvLR``, stepped after every iteration);
* ``constant``: DomainBed's own regime.

An epoch is a pass over the pooled source training examples. ``update`` sees only its
minibatches, so the schedule counts the examples it has been given and the epoch length
(``epoch_examples``) is an hparam.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

SCHEDULES = ("constant", "exponential", "inverse")
EXPONENTIAL_GAMMA = 0.99  # LEARNING_RATE_DECAY_RATE of the authors' PACS configs
INVERSE_GAMMA = 1e-4  # InvLR's defaults, used by the authors' DomainNet configs
INVERSE_POWER = 0.75


def lr_factors(
    schedule: str, update: int, examples_seen: int, epoch_examples: int
) -> tuple[float, float]:
    """(network factor, mask factor) of the learning rates for update number ``update``
    (0 for the first), after ``examples_seen`` examples in the updates before it."""
    if schedule == "constant":
        return 1.0, 1.0
    if schedule == "exponential":
        epoch = examples_seen // epoch_examples
        return EXPONENTIAL_GAMMA**epoch, 1.0
    if schedule == "inverse":
        factor = (1 + INVERSE_GAMMA * update) ** -INVERSE_POWER
        return factor, factor
    raise ValueError(f"schedule must be one of {SCHEDULES}; got {schedule!r}")


class LRSchedule:
    """Sets the learning rates of a network optimiser and (optionally) a mask optimiser before
    every update, from the base rates they were built with.

    The counters are plain attributes, not part of ``model.pkl``: DomainBed's ``train.py``
    never resumes a run from a saved model, and older models keep loading.
    """

    def __init__(
        self,
        schedule: str,
        epoch_examples: int,
        network: torch.optim.Optimizer,
        masks: torch.optim.Optimizer | None = None,
    ) -> None:
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}; got {schedule!r}")
        self.schedule = schedule
        self.epoch_examples = epoch_examples
        self._groups = [
            [(group, group["lr"]) for group in optimizer.param_groups]
            for optimizer in (network, masks)
            if optimizer is not None
        ]
        self.updates = 0
        self.examples_seen = 0

    def before_update(self, minibatches: Sequence) -> dict[str, float]:
        """Set this update's learning rates and count its examples; returns the network's and
        the masks' learning rates to log (nothing at a constant rate)."""
        factors = lr_factors(self.schedule, self.updates, self.examples_seen, self.epoch_examples)
        self.updates += 1
        self.examples_seen += sum(len(x) for x, _ in minibatches)
        if self.schedule == "constant":
            return {}
        logged = {}
        for name, groups, factor in zip(("lr", "mask_lr"), self._groups, factors):
            for group, base in groups:
                group["lr"] = base * factor
            logged[name] = groups[0][1] * factor
        return logged
