"""The paper's aggregate baseline: DMG's network and optimiser without masks."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dmg_domainbed.algorithms.base import PluginAlgorithm, pooled
from dmg_domainbed.algorithms.paper_baselines import paper
from dmg_domainbed.hparams import HParamSpace


class Aggregate(PluginAlgorithm):
    """Aggregate* of the paper (Tables 1-3): one network, cross-entropy on the pooled sources.

    It is DMG with the masks removed: the same network (DomainBed's featurizer, or AlexNet, and
    classifier, dropout off), the same Adam optimiser over it and the same learning-rate
    schedule. Any difference to DMG is the masks' effect.
    """

    HPARAMS = HParamSpace(*paper.SHARED, paper.classifier_init("pytorch"))

    def __init__(self, input_shape, num_classes, num_domains, hparams):
        super().__init__(input_shape, num_classes, num_domains, hparams)
        self.network = paper.network(input_shape, num_classes, hparams)
        self.optimizer = torch.optim.Adam(
            self.network.parameters(), lr=hparams["lr"], weight_decay=hparams["weight_decay"]
        )
        self.schedulers = paper.lr_schedulers(hparams, num_domains, network=self.optimizer)

    def update(self, minibatches, unlabeled=None):
        x, y = pooled(minibatches)
        loss = F.cross_entropy(self.network(x), y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return {"loss": loss.item(), **paper.step_schedulers(self.schedulers)}

    def predict(self, x):
        return self.network(x)
