"""Builders for algorithms as DomainBed builds them: class and hparams from its registries."""

import pytest
import torch
import torchvision

MNIST_SHAPE = (3, 28, 28)


def build(name, num_domains=3, input_shape=MNIST_SHAPE, num_classes=4, dataset="Debug28", **hp):
    from domainbed import algorithms, hparams_registry

    hparams = hparams_registry.default_hparams(name, dataset)
    if len(input_shape) == 1:
        hparams.update(mlp_width=16, mlp_depth=4, mlp_dropout=0.5)
    hparams.update(hp)
    return algorithms.get_algorithm_class(name)(input_shape, num_classes, num_domains, hparams)


def minibatches(num_domains=3, batch=4, input_shape=MNIST_SHAPE, num_classes=4):
    return [
        (torch.randn(batch, *input_shape), torch.randint(0, num_classes, (batch,)))
        for _ in range(num_domains)
    ]


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


@pytest.fixture
def random_resnet18(monkeypatch):
    """DomainBed's ResNet-18 featurizer with random weights instead of its ImageNet download
    (the architecture is the same)."""
    resnet18 = torchvision.models.resnet18
    monkeypatch.setattr(torchvision.models, "resnet18", lambda pretrained: resnet18())


def build_resnet18(name, **hp):
    """``name`` on PACS-shaped inputs with DomainBed's ResNet-18 (use with ``random_resnet18``)."""
    return build(
        name,
        input_shape=(3, 224, 224),
        num_classes=7,
        dataset="PACS",
        resnet18=True,
        resnet50_augmix=False,
        **hp,
    )
