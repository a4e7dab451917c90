"""DMG: Domain-specific Masks for Generalization (Chattopadhyay, Balaji, Hoffman, ECCV 2020)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from domainbed import networks
from torch import nn

from dmg_domainbed.algorithms import named_layers
from dmg_domainbed.algorithms.base import pooled
from dmg_domainbed.algorithms.dmg import masks
from dmg_domainbed.algorithms.domains import domain_labels, known_domains
from dmg_domainbed.algorithms.paper_baselines import paper
from dmg_domainbed.algorithms.paper_baselines.aggregate import Aggregate
from dmg_domainbed.algorithms.paper_baselines.alexnet import AlexNetFeaturizer
from dmg_domainbed.hparams import HParam, HParamSpace
from dmg_domainbed.hparams.trainable import MAX_LOSS_WEIGHT, MAX_LR, MAX_WEIGHT_DECAY

if TYPE_CHECKING:
    from dmg_domainbed.drawing import Drawn

#: Keys of the per-layer hard IoU and per-domain active fraction in ``update``'s diagnostics.
IOU_PREFIX = "mask_iou/"
ACTIVE_PREFIX = "mask_active/d"


class DMG(Aggregate):
    """Per-source-domain masks on the task network's activations (paper Sec. 2).

    Loss (Eq. 3): ``CE + lambda_overlap * sum_layers mean_pairs sIoU(m_i, m_j)
    + lambda_sparsity * sum_layers sum_{d,k} m_d``. Masks are sampled per example with the
    straight-through estimator during training; ``predict`` averages the raw logits of every
    source domain's soft mask; :meth:`predict_known_domain` uses the example's own domain.
    The network and the mask logits have separate Adam optimisers.

    ``mask_lr`` has its own default, sized for DomainBed's budget: Adam moves a logit by at most
    about ``mask_lr`` per step, so a logit can travel about ``mask_lr * steps`` units. The
    default gives a logit within DomainBed's run the travel the authors' 1e-4 gave it over their
    much longer training, so that the masks can become domain-specific at all; the regimes of
    larger and smaller rates are measured in docs/performance.md ("DMG's mask learning rate").
    """

    KNOWN_DOMAIN_PREDICTIONS = {
        "soft": "KnownDomain, soft masks",
        "hard": "KnownDomain, hard masks",
    }
    LEARNED_PICTURES = (
        "per masked layer, every unit's mask probability per source domain and the IoU "
        "between domains"
    )

    def __init__(self, input_shape, num_classes, num_domains, hparams):
        super().__init__(input_shape, num_classes, num_domains, hparams)
        layers = named_layers.resolve(
            hparams["mask_layers"], lambda: default_mask_layers(self.network)
        )
        fold = layers == ["classifier"] and isinstance(self.network.classifier, nn.Linear)
        self.masks = masks.DomainMasks(
            self.network,
            layers,
            num_domains,
            input_shape=input_shape,
            init=hparams["mask_init"],
            init_scalar=hparams["mask_init_scalar"],
            fold=fold,
        )
        self.mask_optimizer = torch.optim.Adam(
            self.masks.parameters(),
            lr=hparams["mask_lr"],
            weight_decay=hparams["mask_weight_decay"],
        )
        self.schedulers |= paper.lr_schedulers(hparams, num_domains, masks=self.mask_optimizer)

    def update(self, minibatches, unlabeled=None):
        x, y = pooled(minibatches)
        with self.masks.per_example(domain_labels(minibatches), "sample"):
            ce = F.cross_entropy(self.network(x), y)
        probs = self.masks.probabilities()
        overlap = sum(masks.overlap_loss(m) for m in probs)  # Eq. 2, summed over layers
        sparsity = sum(masks.sparsity_loss(m) for m in probs)
        hp = self.hparams
        loss = ce + hp["lambda_overlap"] * overlap + hp["lambda_sparsity"] * sparsity  # Eq. 3
        self.optimizer.zero_grad()
        self.mask_optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.mask_optimizer.step()
        logged = self._diagnostics(loss, ce, overlap, sparsity, probs)
        return {**logged, **paper.step_schedulers(self.schedulers)}

    @torch.no_grad()
    def _diagnostics(self, loss, ce, overlap, sparsity, probs) -> dict[str, float]:
        """The loss terms, the mean IoU between domains' hard masks (``m > 0.5``) per layer and
        the fraction of active units per domain over all layers."""
        hard = [masks.hard_masks(m) for m in probs]
        logged = {"loss": loss, "ce": ce, "overlap": overlap, "sparsity": sparsity}
        if self.num_domains > 1:
            for layer, h in zip(self.masks.layer_names, hard, strict=True):
                logged[f"{IOU_PREFIX}{layer}"] = masks.overlap_loss(h)
        active = sum(h.sum(1) for h in hard) / sum(h.shape[1] for h in hard)
        for d in range(self.num_domains):
            logged[f"{ACTIVE_PREFIX}{d}"] = active[d]
        values = torch.stack([value.float() for value in logged.values()]).tolist()
        return dict(zip(logged, values, strict=True))

    def predict(self, x):
        """Out-of-domain prediction: raw logits averaged over the source domains' soft masks."""
        with self.masks.averaged():
            return self.masks.average_logits(self.network(x))

    def predict_known_domain(self, x, domain, mode: str = "soft"):
        """In-domain prediction with the mask of a known source domain (paper Table 3).

        ``domain``: a source-domain index or one per example; ``mode``: ``soft`` (``m_d``) or
        ``hard`` (``m_d > 0.5``, the authors' choice).
        """
        if mode not in masks.MODES:
            raise ValueError(f"mode must be one of {masks.MODES}; got {mode!r}")
        domains = known_domains(domain, len(x), self.num_domains, x.device)
        with self.masks.per_example(domains, mode):
            return self.network(x)

    def draw_learned(self, run, output_dir, stem) -> Drawn:
        """``<stem>.png`` (mask probabilities and hard IoU per layer),
        ``<stem>_probabilities.csv`` and ``<stem>_iou.csv``."""
        from dmg_domainbed.algorithms.dmg import pictures

        return pictures.draw_masks(self, run, output_dir, stem)

    @classmethod
    def training_curves(cls, runs, environments):
        """Overlap loss, hard IoU between domain masks per layer and active fraction per domain,
        over training."""
        from dmg_domainbed.algorithms.dmg import pictures

        return pictures.training_curves(runs, environments, IOU_PREFIX, ACTIVE_PREFIX)


# DMG's hparams (merged into DomainBed's registry; docs/algorithms.md shows them).
DMG.HPARAMS = HParamSpace(
    *Aggregate.HPARAMS,
    HParam(
        "lambda_overlap",
        0.1,
        lambda r: 10 ** r.uniform(-2, 0),
        minimum=0.0,
        maximum=MAX_LOSS_WEIGHT,
        help="weight of the soft-IoU overlap penalty between domain masks",
    ),
    HParam(
        "lambda_sparsity",
        0.0,
        lambda r: 0.0,
        minimum=0.0,
        maximum=MAX_LOSS_WEIGHT,
        help="weight of the sum of mask probabilities",
    ),
    HParam(
        "mask_init",
        "random_uniform",
        lambda r: "random_uniform",
        choices=masks.INITS,
        help="random_uniform: logits ~ U[0,1); scalar: all logits = mask_init_scalar",
    ),
    HParam(
        "mask_init_scalar",
        1.0,
        lambda r: 1.0,
        # beyond +-10, sigmoid's gradient (< 5e-5) leaves the masks where they start
        minimum=-10.0,
        maximum=10.0,
        help="logit value of the scalar init",
    ),
    HParam(
        "mask_lr",
        1e-3,
        lambda r: 10 ** r.uniform(-4, -1),
        minimum=0.0,
        maximum=MAX_LR,
        help="Adam learning rate of the mask logits (the authors: 1e-4, over 50-150 epochs)",
    ),
    HParam(
        "mask_weight_decay",
        0.0,
        lambda r: float(r.choice([0.0, 1e-5])),
        minimum=0.0,
        maximum=MAX_WEIGHT_DECAY,
        per_dataset={"PACS": 1e-5},
        help="Adam weight decay of the mask logits (the authors: 1e-5 on PACS, 0 on DomainNet)",
    ),
    HParam(
        "mask_layers",
        "auto",
        lambda r: "auto",
        types=(str, list),
        validate=named_layers.check_value,
        help="'auto' or the names of the layers whose inputs are masked",
    ),
)


def default_mask_layers(network: nn.Module) -> list[str]:
    """The layers whose inputs DMG masks when ``mask_layers`` is ``"auto"``.

    * ResNet-18/50: inputs of layer3, layer4 and the classifier, per channel for the convs
      (the authors' released ResNet runs);
    * AlexNet: inputs of its two 4096-unit layers and of the classifier (9216, 4096 and 4096
      units: the authors' ``classifier.1``, ``classifier.4`` and ``classifier.6``);
    * MNIST_CNN: input of the last conv block and of the classifier;
    * MLP: its hidden layers' inputs (every post-ReLU activation) and the classifier input;
    * Wide ResNet (32x32 inputs): input of its last stage and of the classifier;
    * anything else: the classifier input.
    """
    featurizer = network.featurizer
    if isinstance(featurizer, networks.ResNet):
        return ["featurizer.network.layer3", "featurizer.network.layer4", "classifier"]
    if isinstance(featurizer, AlexNetFeaturizer):
        return ["featurizer.classifier.1", "featurizer.classifier.4", "classifier"]
    if isinstance(featurizer, networks.MNIST_CNN):
        return ["featurizer.conv4", "classifier"]
    if isinstance(featurizer, networks.MLP):
        hidden = [f"featurizer.hiddens.{i}" for i in range(len(featurizer.hiddens))]
        return hidden + ["featurizer.output", "classifier"]
    if hasattr(featurizer, "layer3"):
        return ["featurizer.layer3", "classifier"]
    return ["classifier"]
