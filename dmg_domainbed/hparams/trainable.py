"""The values of hparams that a run can train with.

DomainBed checks no value: ``lr = 1e30`` trains to NaN losses in a run that reports "done". The
bounds here, far wider than any search range and far below float32's overflow, refuse such
values before any job starts: :data:`TRAINABLE` bounds DomainBed's shared hparams (the sweep
preflight, and a plugin algorithm when built); the plugins' own float hparams take their
``maximum`` from the constants below, so that one kind of hparam has one range."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dmg_domainbed.rules import Rule

#: Learning rates, and multipliers of one (ImportanceMask's unimportant_lr_factor).
MIN_LR, MAX_LR = 1e-10, 10.0
MAX_WEIGHT_DECAY = 10.0
#: A dropout of 1 zeroes every unit in training: nothing downstream learns.
MAX_DROPOUT = 0.99
#: The weight of a penalty added to the loss (DMG's overlap and sparsity, SFMOE's balance).
MAX_LOSS_WEIGHT = 1e4

TRAINABLE = {
    "lr": Rule((float,), minimum=MIN_LR, maximum=MAX_LR),
    "weight_decay": Rule((float,), minimum=0.0, maximum=MAX_WEIGHT_DECAY),
    "batch_size": Rule((int,), minimum=1, maximum=2**16),
    **{
        f"{name}_dropout": Rule((float,), minimum=0.0, maximum=MAX_DROPOUT)
        for name in ("resnet", "vit", "mlp")
    },
}


def check_trainable(hparams: Mapping[str, Any], owner: str) -> None:
    """:class:`~dmg_domainbed.errors.UserError` for a shared hparam outside its bounds."""
    for name, rule in TRAINABLE.items():
        if name in hparams:
            rule.check(
                hparams[name],
                f"{owner} hparam '{name}'",
                "A run cannot train with it: fix it in --hparams or the sweep file.",
            )
