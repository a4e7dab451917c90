"""Builders for algorithms as DomainBed builds them: class and hparams from its registries."""

import pytest
import torch

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
