"""What the paper's three algorithms (Aggregate, MultiHead, DMG) share: the hparams that keep
them in one regime in a DomainBed sweep, and those of the paper's own protocol (its AlexNet
backbone, its learning-rate schedules, its classifier initialisation), with the network they
build and the schedulers of their optimisers (plain ``torch.optim.Adam``, as DomainBed's ERM).

The protocol's hparams default to DomainBed's setting; a sweep file or ``--hparams`` switches
them on (``sweeps/paper_*.toml``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import torch
from domainbed import networks
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from dmg_domainbed.algorithms.paper_baselines import schedules
from dmg_domainbed.algorithms.paper_baselines.alexnet import AlexNetFeaturizer
from dmg_domainbed.errors import UserError
from dmg_domainbed.hparams import HParam
from dmg_domainbed.hparams.trainable import MAX_DROPOUT

#: The paper trains its three networks with dropout off (Sec. 3, implementation details); the
#: featurizer dropouts DomainBed searches are fixed at 0 for Aggregate, MultiHead and DMG, so
#: that the three share one regime in a sweep. A value given with --hparams is used as given.
DROPOUT_OFF = tuple(
    HParam(
        name,
        0.0,
        lambda r: 0.0,
        minimum=0.0,
        maximum=MAX_DROPOUT,
        where_defined=True,
        help=f"dropout of DomainBed's {backbone} featurizer (off in the paper)",
    )
    for name, backbone in (
        ("resnet_dropout", "ResNet"),
        ("vit_dropout", "ViT"),
        ("mlp_dropout", "MLP"),
    )
)

ALEXNET = (
    HParam(
        "alexnet",
        False,
        lambda r: False,
        help="torchvision's ImageNet AlexNet as the featurizer (the paper's first backbone); "
        "3x224x224 image datasets only",
    ),
    HParam(
        "alexnet_dropout",
        0.0,
        lambda r: 0.0,
        minimum=0.0,
        maximum=MAX_DROPOUT,
        help="rate of AlexNet's two dropout layers (the authors: 0.5 for Aggregate and "
        "Multi-Head, off for DMG)",
    ),
)

LR_SCHEDULE = (
    HParam(
        "lr_schedule",
        "constant",
        lambda r: "constant",
        choices=schedules.SCHEDULES,
        help="constant (DomainBed); exponential: network lr x 0.99 per epoch (the authors' "
        "PACS); inverse: every lr x (1 + 1e-4 t)^-0.75 (the authors' DomainNet)",
    ),
    HParam(
        "epoch_examples",
        0,
        lambda r: 0,
        minimum=0,
        help="source training examples per epoch, for lr_schedule 'exponential' (0: not set)",
    ),
)

SHARED = (*DROPOUT_OFF, *ALEXNET, *LR_SCHEDULE)

CLASSIFIER_INITS = ("pytorch", "normal")
#: Standard deviation of the authors' "custom" initialisation of a new last layer
#: (``weights_init`` in prithv1/DMG ``utils/misc.py``); its biases start at 0.
NORMAL_INIT_STD = 0.001


def classifier_init(default: str) -> HParam:
    """The ``classifier_init`` hparam, with the default of the algorithm that declares it."""
    return HParam(
        "classifier_init",
        default,
        lambda r: default,
        choices=CLASSIFIER_INITS,
        help="pytorch: nn.Linear's default; normal: weights ~ N(0, 0.001^2), biases 0 (the "
        "authors' 'custom' init)",
    )


def initialise_classifier(weight: torch.Tensor, bias: torch.Tensor, how: str) -> None:
    """Re-initialise a last layer in place: ``normal`` draws ``N(0, 0.001^2)`` weights and zero
    biases; ``pytorch`` keeps what ``nn.Linear`` drew."""
    if how == "normal":
        with torch.no_grad():
            weight.normal_(0.0, NORMAL_INIT_STD)
            bias.zero_()


def featurizer(input_shape, hparams: Mapping[str, Any]) -> nn.Module:
    """DomainBed's featurizer for ``input_shape``, or AlexNet when ``alexnet`` is true."""
    if not hparams.get("alexnet"):
        return networks.Featurizer(input_shape, hparams)
    if tuple(input_shape) != (3, 224, 224):
        raise UserError(
            f"hparam 'alexnet' is true but the dataset's inputs are {tuple(input_shape)}: "
            "AlexNet takes 3x224x224 images (DomainBed's image datasets, e.g. PACS or "
            """DomainNet); fix it with --hparams '{"alexnet": false}' or use such a dataset"""
        )
    return AlexNetFeaturizer(hparams["alexnet_dropout"])


def network(input_shape, num_classes: int, hparams: Mapping[str, Any]) -> nn.Sequential:
    """:func:`featurizer` followed by DomainBed's ``Classifier`` (whose last linear layer is
    initialised as ``classifier_init`` says), as the layers ``featurizer`` and ``classifier``."""
    features = featurizer(input_shape, hparams)
    classifier = networks.Classifier(
        features.n_outputs, num_classes, hparams["nonlinear_classifier"]
    )
    last = [m for m in classifier.modules() if isinstance(m, nn.Linear)][-1]
    initialise_classifier(last.weight, last.bias, hparams["classifier_init"])
    return nn.Sequential(OrderedDict(featurizer=features, classifier=classifier))


def lr_schedulers(
    hparams: Mapping[str, Any],
    num_domains: int,
    network: torch.optim.Optimizer | None = None,
    masks: torch.optim.Optimizer | None = None,
) -> dict[str, LambdaLR]:
    """The authors' schedule (:mod:`.schedules`) for the network's optimiser
    and/or DMG's mask optimiser, by the name their rate is logged under (``lr``, ``mask_lr``);
    empty at DomainBed's constant rate.

    Each update takes ``batch_size`` examples of each of the ``num_domains`` source domains
    (DomainBed's training loaders), so update ``t`` starts after ``t * batch_size *
    num_domains`` examples: the epoch it falls in.
    """
    schedule = hparams["lr_schedule"]
    if schedule == "constant":
        return {}
    if schedule == "exponential" and hparams["epoch_examples"] < 1:
        raise UserError(
            "hparam 'lr_schedule' is 'exponential', which decays once per epoch, but "
            "'epoch_examples' is not set: give the number of source training examples per "
            "epoch, e.g. for PACS under DomainBed's 80% training splits "
            """--hparams '{"lr_schedule": "exponential", "epoch_examples": 5995}'"""
        )
    network_factor, mask_factor = schedules.factors(
        schedule, hparams["batch_size"] * num_domains, hparams["epoch_examples"]
    )
    schedulers = {}
    if network is not None:
        schedulers["lr"] = LambdaLR(network, network_factor)
    if masks is not None:
        schedulers["mask_lr"] = LambdaLR(masks, mask_factor)
    return schedulers


def step_schedulers(schedulers: Mapping[str, LambdaLR]) -> dict[str, float]:
    """After an update: the learning rates it used, to log; then each scheduler moves on to the
    next update's."""
    used = {name: scheduler.get_last_lr()[0] for name, scheduler in schedulers.items()}
    for scheduler in schedulers.values():
        scheduler.step()
    return used
