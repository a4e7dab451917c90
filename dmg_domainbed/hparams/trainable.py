"""The values of DomainBed's shared hparams that a run can train with.

DomainBed checks no hparam value: ``lr = 1e30`` trains to NaN losses and a run that reports
"done". These bounds (far wider than any search range DomainBed draws from) refuse such values
before any job starts, in the sweep preflight and when a plugin algorithm is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dmg_domainbed.rules import Rule

TRAINABLE = {
    "lr": Rule((float,), minimum=1e-10, maximum=10.0),
    "weight_decay": Rule((float,), minimum=0.0, maximum=10.0),
    "batch_size": Rule((int,), minimum=1, maximum=2**16),
    **{
        f"{name}_dropout": Rule((float,), minimum=0.0, maximum=0.99)
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
