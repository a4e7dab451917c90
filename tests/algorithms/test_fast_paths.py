"""DMG's and MultiHead's batched computations equal their definitions, one domain at a time.

Each test builds an algorithm as DomainBed does (class and hparams from its registries) on a
real DomainBed featurizer and compares the batched computation with a plain loop over source
domains, to floating-point tolerance. Costs are measured by ``benchmarks/step_time.py``, never here.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from domainbed import algorithms, hparams_registry

NUM_DOMAINS = 3
NUM_CLASSES = 4
MNIST_SHAPE = (1, 28, 28)
FLAT_SHAPE = (12,)
SHAPES = pytest.mark.parametrize("input_shape", [MNIST_SHAPE, FLAT_SHAPE], ids=["cnn", "mlp"])
TOLERANCE = {"atol": 1e-5, "rtol": 1e-5}


def build(name: str, input_shape: tuple[int, ...], **overrides) -> algorithms.Algorithm:
    hparams = hparams_registry.default_hparams(name, "RotatedMNIST")
    hparams.update(mlp_width=16, mlp_depth=4, mlp_dropout=0.0)
    hparams.update(overrides)
    torch.manual_seed(0)
    return algorithms.get_algorithm_class(name)(input_shape, NUM_CLASSES, NUM_DOMAINS, hparams)


def twin(algorithm: algorithms.Algorithm, name: str, input_shape, **overrides):
    """A second instance with the same weights (``deepcopy`` would share the mask hooks)."""
    copy = build(name, input_shape, **overrides)
    copy.load_state_dict(algorithm.state_dict())
    return copy


def minibatches(input_shape: tuple[int, ...], sizes=(5, 3, 4)) -> list:
    generator = torch.Generator().manual_seed(1)
    return [
        (
            torch.randn(size, *input_shape, generator=generator),
            torch.randint(0, NUM_CLASSES, (size,), generator=generator),
        )
        for size in sizes
    ]


def spread_masks(dmg: algorithms.Algorithm, scale: float) -> None:
    """Mask logits ~ N(0, scale^2): distinct masks per domain (large scale: near-binary)."""
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for logits in dmg.masks.logits:
            logits.copy_(scale * torch.randn(logits.shape, generator=generator))


def soft_logits_of_domain(dmg: algorithms.Algorithm, x: torch.Tensor, d: int) -> torch.Tensor:
    with dmg.masks.per_example(torch.full((len(x),), d), "soft"):
        return dmg.network(x)


def network_gradients(algorithm: algorithms.Algorithm) -> list[torch.Tensor]:
    return [p.grad for p in algorithm.network.parameters()]


def assert_predict_averages_soft_mask_logits(dmg, input_shape) -> None:
    spread_masks(dmg, scale=2.0)
    dmg.eval()
    x = torch.randn(6, *input_shape)
    with torch.no_grad():
        expected = torch.stack([soft_logits_of_domain(dmg, x, d) for d in range(NUM_DOMAINS)]).mean(
            0
        )
        assert torch.allclose(dmg.predict(x), expected, **TOLERANCE)


@SHAPES
def test_dmg_predict_is_the_mean_over_domains_of_the_soft_mask_logits(input_shape):
    assert_predict_averages_soft_mask_logits(build("DMG", input_shape), input_shape)


@SHAPES
def test_dmg_folded_classifier_mask_equals_the_averaged_logits(input_shape):
    dmg = build("DMG", input_shape, mask_layers=["classifier"])
    assert dmg.masks.fold, "a mask on the final linear layer alone folds into one pass"
    assert_predict_averages_soft_mask_logits(dmg, input_shape)


@SHAPES
def test_dmg_training_step_equals_a_loop_over_domains_with_the_same_draws(input_shape):
    # Logits of +-30 make every Bernoulli draw certain (probability 1 or ~1e-13), so the
    # batched step and the loop see the same binary masks however the draws are ordered.
    dmg = build("DMG", input_shape)
    with torch.no_grad():
        for logits in dmg.masks.logits:
            logits.copy_(30.0 * torch.randint(0, 2, logits.shape) * 2 - 30.0)
    loop = twin(dmg, "DMG", input_shape)
    batches = minibatches(input_shape)
    torch.manual_seed(3)
    ce = dmg.update(batches)["ce"]

    logits = []
    for d, (x, _) in enumerate(batches):
        with loop.masks.per_example(torch.full((len(x),), d), "sample"):
            logits.append(loop.network(x))
    expected = F.cross_entropy(torch.cat(logits), torch.cat([y for _, y in batches]))
    expected.backward()
    assert ce == pytest.approx(expected.item(), rel=1e-5)
    for got, want in zip(network_gradients(dmg), network_gradients(loop), strict=True):
        assert torch.allclose(got, want, **TOLERANCE)


@SHAPES
def test_dmg_per_example_routing_equals_a_loop_over_domains_forward_and_backward(input_shape):
    dmg = build("DMG", input_shape)
    spread_masks(dmg, scale=2.0)
    loop = twin(dmg, "DMG", input_shape)
    batches = minibatches(input_shape)
    x = torch.cat([x for x, _ in batches])
    domains = torch.cat([torch.full((len(x),), d) for d, (x, _) in enumerate(batches)])
    with dmg.masks.per_example(domains, "soft"):
        batched = dmg.network(x)
    looped = torch.cat([soft_logits_of_domain(loop, x, d) for d, (x, _) in enumerate(batches)])
    assert torch.allclose(batched, looped, **TOLERANCE)

    batched.square().sum().backward()
    looped.square().sum().backward()
    for got, want in zip(dmg.masks.logits, loop.masks.logits, strict=True):
        assert torch.allclose(got.grad, want.grad, **TOLERANCE)


def head_logits(multihead: algorithms.Algorithm, x: torch.Tensor, d: int) -> torch.Tensor:
    features = multihead.featurizer(x)
    return F.linear(features, multihead.head_weight[d], multihead.head_bias[d])


@SHAPES
def test_multihead_predict_is_the_mean_of_each_heads_logits(input_shape):
    multihead = build("MultiHead", input_shape)
    multihead.eval()
    x = torch.randn(6, *input_shape)
    with torch.no_grad():
        expected = torch.stack([head_logits(multihead, x, d) for d in range(NUM_DOMAINS)])
        assert torch.allclose(multihead.predict(x), expected.mean(0), **TOLERANCE)


@SHAPES
def test_multihead_training_step_equals_a_loop_routing_each_domain_to_its_head(input_shape):
    multihead = build("MultiHead", input_shape)
    loop = twin(multihead, "MultiHead", input_shape)
    batches = minibatches(input_shape)
    loss = multihead.update(batches)["loss"]

    logits = torch.cat([head_logits(loop, x, d) for d, (x, _) in enumerate(batches)])
    expected = F.cross_entropy(logits, torch.cat([y for _, y in batches]))
    expected.backward()
    assert loss == pytest.approx(expected.item(), rel=1e-5)
    for got, want in zip(multihead.parameters(), loop.parameters(), strict=True):
        assert torch.allclose(got.grad, want.grad, **TOLERANCE)
