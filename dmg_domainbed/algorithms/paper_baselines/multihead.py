"""Multi-head baseline: a shared featurizer and one classifier head per source domain."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dmg_domainbed.algorithms.base import PluginAlgorithm, pooled
from dmg_domainbed.algorithms.domains import domain_labels, known_domains
from dmg_domainbed.algorithms.paper_baselines import paper
from dmg_domainbed.hparams import HParamSpace


class MultiHead(PluginAlgorithm):
    """Multi-Head of the paper (Tables 1-3).

    A shared featurizer and ``D`` linear heads, head ``d`` with weights ``W_d`` and bias ``b_d``
    (stored stacked, ``head_weight [D, C, F]`` and ``head_bias [D, C]``). Training routes every
    example to its own domain's head; ``predict`` averages the raw logits of all heads, which is
    exactly one linear layer with the mean weights and biases,
    ``mean_d (W_d f + b_d) = (mean_d W_d) f + mean_d b_d``; :meth:`predict_known_domain` uses the
    example's own head. The featurizer is DomainBed's (or AlexNet), with its dropout off by
    default as in Aggregate and DMG (the paper's regime); heads start as the authors' did
    (``classifier_init = normal``: weights ``N(0, 0.001^2)``, biases 0, in both their PACS and
    DomainNet configs).
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
        self.optimizer = torch.optim.Adam(
            self.parameters(), lr=hparams["lr"], weight_decay=hparams["weight_decay"]
        )
        self.schedulers = paper.lr_schedulers(hparams, num_domains, network=self.optimizer)

    def own_heads(self, features: torch.Tensor, domains: torch.Tensor) -> torch.Tensor:
        """Logits of example ``n``'s own head ``d = domains[n]``: ``W_d f_n + b_d``."""
        every_head = torch.einsum("dcf,nf->ndc", self.head_weight, features) + self.head_bias
        return every_head[torch.arange(len(features), device=features.device), domains]

    def update(self, minibatches, unlabeled=None):
        x, y = pooled(minibatches)
        logits = self.own_heads(self.featurizer(x), domain_labels(minibatches))
        loss = F.cross_entropy(logits, y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return {"loss": loss.item(), **paper.step_schedulers(self.schedulers)}

    def predict(self, x):
        """Mean of the heads' raw logits, as one linear layer with mean weight and bias."""
        return F.linear(self.featurizer(x), self.head_weight.mean(0), self.head_bias.mean(0))

    def predict_known_domain(self, x, domain, mode: str = "soft"):
        """The logits of each example's own source-domain head (``mode`` has no effect)."""
        domains = known_domains(domain, len(x), self.num_domains, x.device)
        return self.own_heads(self.featurizer(x), domains)
