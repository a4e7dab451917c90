"""What the algorithms of this package share, and what the rest of the package asks of one.

DomainBed's contract is ``__init__(input_shape, num_classes, num_domains, hparams)``,
``update(minibatches, unlabeled) -> dict`` and ``predict(x)``. On top of it an algorithm of this
package declares, in its own file next to its class, everything that reporting, the CLI and the
demo need to know about it; they ask the algorithm class and never test its name:

============================== ===============================================================
``HPARAMS``                    its hparams (:class:`~dmg_domainbed.hparams.HParamSpace`),
                               validated when the algorithm is built, with DomainBed's shared
                               ones (:mod:`dmg_domainbed.hparams.trainable`); a name that
                               neither DomainBed nor the algorithm defines is refused
``KNOWN_DOMAIN_PREDICTIONS``   known-domain predictions (paper Table 3) as ``{mode: label}``,
                               served by ``predict_known_domain(x, domain, mode)``
``run_length_hparams(steps)``  hparams whose value depends on the run's number of steps
``LEARNED_PICTURES``           what ``draw_learned(run, output_dir, stem)`` draws of a finished
                               run (``dmg-domainbed masks``); empty: nothing. ``run`` is plain
                               data (:class:`~dmg_domainbed.drawing.FinishedRun`)
``SAMPLE_IMAGES``              held-out images per environment ``draw_learned`` needs in
                               ``run.samples`` (0: none)
``training_curves(runs, envs)`` a figure of its logged diagnostics over training, for sweep
                               reports; ``None``: none
``check_input_shape(shape)``   classmethod: ``UserError`` for inputs it cannot take (``doctor``)
``check_weights(hparams)``     classmethod of an algorithm that loads its own pretrained weights:
                               a ``WeightsCheck`` (``doctor``, ``sweep``)
============================== ===============================================================

DomainBed's own algorithms declare none of this; the functions at the end of this module give
the answer for any DomainBed algorithm class.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from domainbed import networks
from domainbed.algorithms import Algorithm
from torch import nn

from dmg_domainbed.hparams import HParamSpace, check_trainable, reject_unknown

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from dmg_domainbed.drawing import Drawn, FinishedRun


class PluginAlgorithm(Algorithm):
    """Base of this package's algorithms: hparam validation and the declarations above."""

    HPARAMS: ClassVar[HParamSpace] = HParamSpace()
    KNOWN_DOMAIN_PREDICTIONS: ClassVar[Mapping[str, str]] = {}
    LEARNED_PICTURES: ClassVar[str] = ""
    SAMPLE_IMAGES: ClassVar[int] = 0

    def __init__(self, input_shape, num_classes, num_domains, hparams):
        super().__init__(input_shape, num_classes, num_domains, hparams)
        reject_unknown(type(self), hparams)
        self.HPARAMS.validate(hparams, type(self).__name__)
        check_trainable(hparams, type(self).__name__)
        self.num_domains = num_domains
        self.num_classes = num_classes

    @classmethod
    def run_length_hparams(cls, steps: int) -> dict[str, Any]:
        """Hparams sized for a run of ``steps`` steps (none by default)."""
        return {}

    def draw_learned(self, run: FinishedRun, output_dir: Path, stem: str) -> Drawn:
        """Pictures and tables of what a finished run learned, named ``<stem>*``."""
        raise NotImplementedError(f"{type(self).__name__} draws nothing of a finished run")

    @classmethod
    def training_curves(
        cls, runs: Sequence[Sequence[dict]], environments: Sequence[str]
    ) -> Figure | None:
        """A figure of the diagnostics ``update`` logs, over training, for one run per choice of
        test environments (its records by step); ``None`` when the algorithm has none."""
        return None


def pooled(minibatches) -> tuple[torch.Tensor, torch.Tensor]:
    """The source minibatches concatenated: inputs and labels, domain by domain."""
    return torch.cat([x for x, _ in minibatches]), torch.cat([y for _, y in minibatches])


def featurizer_classifier(
    input_shape, num_classes: int, hparams: Mapping[str, Any]
) -> nn.Sequential:
    """DomainBed's ``Featurizer`` for ``input_shape`` followed by its ``Classifier``, as the
    layers ``featurizer`` and ``classifier`` (ERM's network)."""
    featurizer = networks.Featurizer(input_shape, hparams)
    classifier = networks.Classifier(
        featurizer.n_outputs, num_classes, hparams["nonlinear_classifier"]
    )
    return nn.Sequential(OrderedDict(featurizer=featurizer, classifier=classifier))


def known_domain_predictions(algorithm_class: type) -> Mapping[str, str]:
    """``{mode: label}`` of the known-domain predictions ``algorithm_class`` offers."""
    return getattr(algorithm_class, "KNOWN_DOMAIN_PREDICTIONS", {})


def run_length_hparams(algorithm_class: type, steps: int) -> dict[str, Any]:
    """The hparams ``algorithm_class`` sizes for a run of ``steps`` steps."""
    scale = getattr(algorithm_class, "run_length_hparams", None)
    return scale(steps) if scale is not None else {}


def learned_pictures(algorithm_class: type) -> str:
    """What ``algorithm_class`` draws of a finished run; empty when nothing."""
    return getattr(algorithm_class, "LEARNED_PICTURES", "")


def sample_images(algorithm_class: type) -> int:
    """Held-out images per environment that ``algorithm_class`` draws what it learned from."""
    return getattr(algorithm_class, "SAMPLE_IMAGES", 0)


def training_curves(algorithm_class: type, runs, environments) -> Figure | None:
    """``algorithm_class``'s figure of diagnostics over training, or ``None``."""
    draw = getattr(algorithm_class, "training_curves", None)
    return draw(runs, environments) if draw is not None else None
