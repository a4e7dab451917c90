"""The paper's aggregate baseline: DMG's network and optimiser without masks."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from domainbed.algorithms import Algorithm

from dmg_domainbed.algorithms.task_network import TaskNetwork
from dmg_domainbed.hparams import HParamSpace, reject_unknown


class Aggregate(Algorithm):
    """Aggregate* of the paper (Tables 1-3): one network, cross-entropy on the pooled sources.

    It is DMG with the masks removed: the same :class:`TaskNetwork` (dropout off), the same Adam
    optimiser over the network. Any difference to DMG is the effect of the masks.
    """

    HPARAMS = HParamSpace()

    def __init__(self, input_shape, num_classes, num_domains, hparams):
        super().__init__(input_shape, num_classes, num_domains, hparams)
        reject_unknown(type(self), hparams)
        type(self).HPARAMS.validate(hparams, type(self).__name__)
        self.num_domains = num_domains
        self.network = TaskNetwork(input_shape, num_classes, hparams)
        self.optimizer = torch.optim.Adam(
            self.network.parameters(), lr=hparams["lr"], weight_decay=hparams["weight_decay"]
        )

    def update(self, minibatches, unlabeled=None):
        x = torch.cat([x for x, _ in minibatches])
        y = torch.cat([y for _, y in minibatches])
        loss = F.cross_entropy(self.network(x), y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return {"loss": loss.item()}

    def predict(self, x):
        return self.network(x)
