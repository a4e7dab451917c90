"""What the algorithms of this package share, and what the rest of the package asks of one.

A plugin's contract is DomainBed's: ``__init__(input_shape, num_classes, num_domains,
hparams)``, ``update(minibatches, unlabeled) -> dict`` of floats and ``predict(x)``; with an
``HPARAMS`` declaration (:mod:`dmg_domainbed.integration`) it is complete. Everything else is
optional: :class:`PluginAlgorithm` declares each question the reports, the CLI and the demo ask
of an algorithm, with a default that means "nothing of this"; a subclass overrides what it
offers. The callers ask the class, through :func:`declarations_of`, and never test its name:

============================== ===============================================================
``HPARAMS``                    its hparams (:class:`~dmg_domainbed.hparams.HParamSpace`),
                               their values validated when the algorithm is built, with
                               DomainBed's shared ones (:mod:`dmg_domainbed.hparams.trainable`);
                               the names of every algorithm's hparams are checked on building
                               (:mod:`dmg_domainbed.hparams.names`)
``KNOWN_DOMAIN_PREDICTIONS``   known-domain predictions (paper Table 3) as ``{mode: label}``,
                               served by ``predict_known_domain(x, domain, mode)``; none
``check_hparams(hparams)``     ``UserError`` for values it cannot train with (built, and
                               every job of a sweep before launch); its ``HPARAMS``' ranges
``run_length_hparams(steps)``  hparams whose value depends on the run's number of steps; none
``LEARNED_PICTURES``           what ``draw_learned(run, output_dir, stem)`` draws of a finished
                               run (``dmg-domainbed masks``); empty: nothing. ``run`` is plain
                               data (:class:`~dmg_domainbed.drawing.FinishedRun`)
``SAMPLE_IMAGES``              held-out images per environment ``draw_learned`` needs in
                               ``run.samples``; 0
``training_curves(runs, envs)`` a figure of its logged diagnostics over training, for sweep
                               reports; ``None``
``check_input_shape(shape)``   ``UserError`` for inputs it cannot take (``doctor``); takes any
``check_weights(hparams)``     a ``WeightsCheck`` of the pretrained weights it loads itself
                               (``doctor``, ``sweep``); ``None``: only DomainBed's featurizer's
============================== ===============================================================

An algorithm that subclasses DomainBed's ``Algorithm`` directly (another package's, or
DomainBed's own) declares nothing: :func:`declarations_of` answers for it with these defaults.
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

from dmg_domainbed.hparams import HParamSpace, check_trainable

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from dmg_domainbed.drawing import Drawn, FinishedRun
    from dmg_domainbed.weight_files import WeightsCheck


class PluginAlgorithm(Algorithm):
    """Base of this package's algorithms: hparam values validated and the declarations above."""

    HPARAMS: ClassVar[HParamSpace] = HParamSpace()
    KNOWN_DOMAIN_PREDICTIONS: ClassVar[Mapping[str, str]] = {}
    LEARNED_PICTURES: ClassVar[str] = ""
    SAMPLE_IMAGES: ClassVar[int] = 0

    def __init__(self, input_shape, num_classes, num_domains, hparams):
        super().__init__(input_shape, num_classes, num_domains, hparams)
        self.check_hparams(hparams)
        self.num_domains = num_domains
        self.num_classes = num_classes

    @classmethod
    def check_hparams(cls, hparams: Mapping[str, Any]) -> None:
        """``UserError`` for values it cannot train with: its declared ones out of their range,
        DomainBed's shared ones out of theirs. Asked when it is built, and of every job's
        hparams before a sweep launches, so a subclass that adds a check adds it here."""
        cls.HPARAMS.validate(hparams, cls.__name__)
        check_trainable(hparams, cls.__name__)

    @classmethod
    def run_length_hparams(cls, steps: int) -> dict[str, Any]:
        """Hparams sized for a run of ``steps`` steps (none by default)."""
        return {}

    def predict_known_domain(self, x: torch.Tensor, domain: int, mode: str) -> torch.Tensor:
        """Logits of ``x`` known to come from source domain ``domain``, in one of the modes of
        ``KNOWN_DOMAIN_PREDICTIONS``."""
        raise NotImplementedError(f"{type(self).__name__} has no known-domain predictions")

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

    @classmethod
    def check_input_shape(cls, input_shape: tuple[int, ...]) -> None:
        """Raise ``UserError`` for an input shape the algorithm cannot take (any by default)."""

    @classmethod
    def check_weights(cls, hparams: Mapping[str, Any]) -> WeightsCheck | None:
        """The pretrained weights the algorithm loads itself, not through DomainBed's
        featurizer; ``None`` when it loads none."""
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


def declarations_of(algorithm_class: type) -> type[PluginAlgorithm]:
    """The class that answers the package's questions about ``algorithm_class``: itself when it
    is a :class:`PluginAlgorithm`, else :class:`PluginAlgorithm`, whose defaults declare
    nothing (a DomainBed ``Algorithm`` from elsewhere)."""
    return algorithm_class if issubclass(algorithm_class, PluginAlgorithm) else PluginAlgorithm
