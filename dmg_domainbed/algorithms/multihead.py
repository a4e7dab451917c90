"""Multi-head baseline: a shared featurizer and one classifier head per source domain."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dmg_domainbed.algorithms import paper
from dmg_domainbed.algorithms.base import PluginAlgorithm, pooled
from dmg_domainbed.algorithms.domains import domain_labels, known_domains
from dmg_domainbed.hparams import HParamSpace


class MultiHead(PluginAlgorithm):
    """Multi-Head of the paper (Tables 1-3).

    Training routes every example to its own domain's linear head; ``predict`` averages the raw
    logits of all heads, computed exactly as one linear layer with the mean weights and biases;
    :meth:`predict_known_domain` uses the example's own head. All heads are evaluated in one
    matrix product, so there is no loop over domains. The featurizer is DomainBed's (or AlexNet),
    with its dropout off by default as in Aggregate and DMG (the paper's regime); heads are
    always linear, initialised as the authors' (``classifier_init = normal``: weights
    ``N(0, 0.001^2)``, biases 0, in both their PACS and DomainNet configs).
    """

    HPARAMS = HParamSpace(*paper.SHARED, paper.classifier_init("normal"))
    KNOWN_DOMAIN_PREDICTIONS = {"soft": "KnownDomain, own head"}

    def __init__(self, input_shape, num_classes, num_domains, hparams):
        super().__init__(input_shape, num_classes, num_domains, hparams)
        self.featurizer = paper.featurizer(input_shape, hparams)
        heads = [nn.Linear(self.featurizer.n_outputs, num_classes) for _ in range(num_domains)]
        self.head_weight = nn.Parameter(torch.stack([h.weight.detach() for h in heads]))
        self.head_bias = nn.Parameter(torch.stack([h.bias.detach() for h in heads]))
        paper.initialise_classifier(self.head_weight, self.head_bias, hparams["classifier_init"])
        self.optimizer = paper.fused_adam(
            self.parameters(), lr=hparams["lr"], weight_decay=hparams["weight_decay"]
        )
        self.schedule = paper.lr_schedule(hparams, self.optimizer)

    def all_heads(self, features: torch.Tensor) -> torch.Tensor:
        """``[N, D, C]`` logits of every head for every example."""
        weight = self.head_weight.reshape(-1, self.head_weight.shape[-1])
        logits = F.linear(features, weight, self.head_bias.reshape(-1))
        return logits.view(len(features), self.num_domains, self.num_classes)

    def _own_heads(self, features: torch.Tensor, domains: torch.Tensor) -> torch.Tensor:
        logits = self.all_heads(features)
        index = domains.view(-1, 1, 1).expand(-1, 1, self.num_classes)
        return logits.gather(1, index).squeeze(1)

    def _own_heads_of_equal_blocks(self, features: torch.Tensor) -> torch.Tensor:
        """Head ``d`` on the ``d``-th of ``D`` equal contiguous blocks: one batched product."""
        blocks = features.view(self.num_domains, -1, features.shape[-1])
        weight = self.head_weight.transpose(1, 2)
        logits = torch.baddbmm(self.head_bias.unsqueeze(1), blocks, weight)
        return logits.view(-1, self.num_classes)

    def update(self, minibatches, unlabeled=None):
        rates = self.schedule.before_update(minibatches)
        x, y = pooled(minibatches)
        features = self.featurizer(x)
        if len({len(x) for x, _ in minibatches}) == 1:  # DomainBed's usual equal batches
            logits = self._own_heads_of_equal_blocks(features)
        else:
            logits = self._own_heads(features, domain_labels(minibatches))
        loss = F.cross_entropy(logits, y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return {"loss": loss.item(), **rates}

    def predict(self, x):
        """Mean of the heads' raw logits, as one linear layer with mean weight and bias."""
        return F.linear(self.featurizer(x), self.head_weight.mean(0), self.head_bias.mean(0))

    def predict_known_domain(self, x, domain, mode: str = "soft"):
        """The logits of each example's own source-domain head (``mode`` has no effect)."""
        domains = known_domains(domain, len(x), self.num_domains, x.device)
        return self._own_heads(self.featurizer(x), domains)
