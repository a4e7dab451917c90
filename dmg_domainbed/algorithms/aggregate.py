"""The paper's aggregate baseline: DMG's network and optimiser without masks."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dmg_domainbed.algorithms.base import PluginAlgorithm, featurizer_classifier, pooled
from dmg_domainbed.hparams import HParam, HParamSpace

#: The paper trains its three networks with dropout off (Sec. 3, implementation details); the
#: featurizer dropouts DomainBed searches are fixed at 0 for Aggregate, MultiHead and DMG, so
#: that the three share one regime in a sweep. A value given with --hparams is used as given.
DROPOUT_OFF = tuple(
    HParam(
        name,
        0.0,
        lambda r: 0.0,
        minimum=0.0,
        maximum=1.0,
        where_defined=True,
        help=f"dropout of DomainBed's {backbone} featurizer (off in the paper)",
    )
    for name, backbone in (
        ("resnet_dropout", "ResNet"),
        ("vit_dropout", "ViT"),
        ("mlp_dropout", "MLP"),
    )
)


class Aggregate(PluginAlgorithm):
    """Aggregate* of the paper (Tables 1-3): one network, cross-entropy on the pooled sources.

    It is DMG with the masks removed: the same network (DomainBed's featurizer and classifier,
    dropout off), the same Adam optimiser over it. Any difference to DMG is the masks' effect.
    """

    HPARAMS = HParamSpace(*DROPOUT_OFF)

    def __init__(self, input_shape, num_classes, num_domains, hparams):
        super().__init__(input_shape, num_classes, num_domains, hparams)
        self.network = featurizer_classifier(input_shape, num_classes, hparams)
        self.optimizer = torch.optim.Adam(
            self.network.parameters(), lr=hparams["lr"], weight_decay=hparams["weight_decay"]
        )

    def update(self, minibatches, unlabeled=None):
        x, y = pooled(minibatches)
        loss = F.cross_entropy(self.network(x), y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return {"loss": loss.item()}

    def predict(self, x):
        return self.network(x)
