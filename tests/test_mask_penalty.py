"""The fused mask penalty equals the plain Eq. (2)-(3) terms of masks.py, value and gradient."""

import pytest
import torch

from dmg_domainbed import masks
from dmg_domainbed.mask_penalty import mask_penalty

pytestmark = pytest.mark.no_domainbed

WIDTHS = (4, 7, 3)  # layers of different widths: the stacked probabilities are zero-padded


def random_logits(num_domains: int, seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [
        (
            3 * torch.randn(num_domains, width, generator=generator, dtype=torch.float64)
        ).requires_grad_()
        for width in WIDTHS
    ]


def plain_penalty(logits, lambda_overlap, lambda_sparsity):
    probs = [torch.sigmoid(layer) for layer in logits]
    overlap = sum(masks.overlap_loss(p) for p in probs)
    sparsity = sum(masks.sparsity_loss(p) for p in probs)
    return lambda_overlap * overlap + lambda_sparsity * sparsity, overlap, sparsity


@pytest.mark.parametrize("num_domains", [1, 2, 3, 5])
@pytest.mark.parametrize("lambdas", [(0.1, 0.0), (0.3, 0.07), (0.0, 1.0)])
def test_value_and_gradient_equal_the_plain_definitions(num_domains, lambdas):
    fused = random_logits(num_domains, seed=num_domains)
    plain = [layer.detach().clone().requires_grad_() for layer in fused]

    penalty, overlap, sparsity, probs = mask_penalty(fused, *lambdas)
    expected, expected_overlap, expected_sparsity = plain_penalty(plain, *lambdas)
    assert penalty.item() == pytest.approx(expected.item(), rel=1e-12, abs=1e-12)
    assert overlap.item() == pytest.approx(expected_overlap.item(), rel=1e-12, abs=1e-12)
    assert sparsity.item() == pytest.approx(expected_sparsity.item(), rel=1e-12)
    assert probs.shape == (len(WIDTHS), num_domains, max(WIDTHS))

    (2.5 * penalty).backward()
    (2.5 * expected).backward()
    for got, want in zip(fused, plain, strict=True):
        assert torch.allclose(got.grad, want.grad, rtol=1e-10, atol=1e-12)


def test_gradient_passes_a_finite_difference_check():
    logits = tuple(random_logits(3, seed=7))
    assert torch.autograd.gradcheck(lambda *layers: mask_penalty(layers, 0.4, 0.02)[0], logits)


def test_only_the_penalty_carries_a_gradient():
    penalty, overlap, sparsity, probs = mask_penalty(random_logits(3, seed=1), 0.1, 0.0)
    assert penalty.requires_grad
    assert not (overlap.requires_grad or sparsity.requires_grad or probs.requires_grad)
