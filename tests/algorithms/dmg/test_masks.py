"""The mask math of DMG (paper Sec. 2), pinned with hand-computed values. No DomainBed needed."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dmg_domainbed.algorithms.dmg import masks

pytestmark = pytest.mark.no_domainbed


def logit(p: float) -> float:
    return math.log(p / (1 - p))


def test_soft_iou_of_known_masks():
    a = torch.tensor([1.0, 0.5, 0.0])
    b = torch.tensor([0.5, 0.5, 1.0])
    # a.b = 0.5 + 0.25 + 0 = 0.75; sum(a + b - ab) = 1 + 0.75 + 1 = 2.75
    assert masks.soft_iou(a, b).item() == pytest.approx((0.75 + 1e-6) / (2.75 + 1e-6))
    binary = torch.tensor([1.0, 0.0, 1.0])
    assert masks.soft_iou(binary, binary).item() == pytest.approx(1.0)
    disjoint = masks.soft_iou(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]))
    assert disjoint.item() == pytest.approx(1e-6 / (2 + 1e-6))


def test_pairwise_matrix_matches_the_pair_formula():
    probs = torch.rand(4, 7)
    matrix = masks.pairwise_soft_iou(probs)
    for i in range(4):
        for j in range(4):
            assert matrix[i, j].item() == pytest.approx(masks.soft_iou(probs[i], probs[j]).item())


def test_overlap_is_the_mean_over_unordered_pairs():
    probs = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    # pairs: (0,1) ~0, (0,2) = 1/2, (1,2) = 1/2  -> mean 1/3
    expected = (1e-6 / (2 + 1e-6) + 2 * (1 + 1e-6) / (2 + 1e-6)) / 3
    assert masks.overlap_loss(probs).item() == pytest.approx(expected)


def test_pair_helpers_give_the_same_numbers_on_numpy_arrays():
    probs = torch.rand(2, 4, 6, dtype=torch.float64)  # two layers, four domains
    matrix = masks.pairwise_soft_iou(probs)
    assert torch.allclose(torch.from_numpy(masks.pairwise_soft_iou(probs.numpy())), matrix)
    rows, cols = torch.triu_indices(4, 4, offset=1)
    upper_mean = matrix[:, rows, cols].mean(-1)
    assert torch.allclose(masks.mean_over_pairs(matrix), upper_mean)
    assert torch.allclose(torch.from_numpy(masks.mean_over_pairs(matrix.numpy())), upper_mean)


def test_overlap_of_one_domain_is_zero():
    assert masks.overlap_loss(torch.rand(1, 5)).item() == 0.0


def test_sparsity_is_the_sum_of_probabilities():
    assert masks.sparsity_loss(torch.tensor([[0.25, 0.5], [1.0, 0.0]])).item() == 1.75


def test_straight_through_forward_is_binary_and_gradient_is_that_of_the_probability():
    torch.manual_seed(0)
    logits = torch.tensor([logit(0.2), 0.0, logit(0.9)], requires_grad=True)
    probs = torch.sigmoid(logits)
    x = torch.tensor([2.0, -3.0, 5.0])
    sampled = masks.straight_through_bernoulli(probs)
    assert set(sampled.tolist()) <= {0.0, 1.0}
    (sampled * x).sum().backward()
    p = probs.detach()
    assert torch.allclose(logits.grad, x * p * (1 - p))


def test_initialisations():
    torch.manual_seed(0)
    uniform = masks.initial_logits(3, 1000, "random_uniform", 1.0)
    assert uniform.shape == (3, 1000)
    assert 0.0 <= uniform.min() and uniform.max() < 1.0 and uniform.std() > 0.2
    assert torch.equal(masks.initial_logits(2, 4, "scalar", 2.5), torch.full((2, 4), 2.5))
    with pytest.raises(ValueError, match="random_uniform, scalar"):
        masks.initial_logits(2, 4, "gaussian", 1.0)


class TwoLayer(nn.Module):
    """x -> relu(first(x)) -> second: masks on the inputs of first and second."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(3, 4)
        self.second = nn.Linear(4, 2)

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))


def make_masks(network, layers=("first", "second"), num_domains=3, **kwargs):
    return masks.DomainMasks(network, list(layers), num_domains, (3,), **kwargs)


def set_probabilities(domain_masks, per_layer):
    with torch.no_grad():
        for parameter, probs in zip(domain_masks.logits, per_layer, strict=True):
            parameter.copy_(torch.logit(torch.as_tensor(probs, dtype=torch.float32)))


def by_hand(network, x, first_mask, second_mask):
    """The masked forward pass written out (the layers' own hooks bypassed)."""
    hidden = torch.relu(F.linear(x * first_mask, network.first.weight, network.first.bias))
    return F.linear(hidden * second_mask, network.second.weight, network.second.bias)


def test_masks_have_one_logit_per_input_unit_and_domain():
    domain_masks = make_masks(TwoLayer())
    assert [tuple(p.shape) for p in domain_masks.logits] == [(3, 3), (3, 4)]


def test_unknown_layer_is_an_error_listing_the_valid_names():
    with pytest.raises(ValueError, match=r"unknown \['third'\].*Valid layer names: first, second"):
        make_masks(TwoLayer(), layers=("first", "third"))


def test_network_outside_a_routing_context_refuses_to_run():
    network = TwoLayer()
    make_masks(network)
    with pytest.raises(RuntimeError, match="masked by domain"):
        network(torch.zeros(1, 3))


def test_sampling_is_per_example_and_per_domain():
    torch.manual_seed(0)
    network = TwoLayer()
    domain_masks = make_masks(network, layers=("first",), num_domains=2)
    set_probabilities(domain_masks, [[[0.5] * 3, [1 - 1e-7] * 3]])
    seen = []
    network.first.register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    x = torch.ones(64, 3)
    domains = torch.tensor([0] * 32 + [1] * 32)
    with domain_masks.per_example(domains, "sample"):
        network(x)
    masked = seen[-1]
    # domain 1 keeps everything; domain 0 draws a different mask for different examples
    assert torch.equal(masked[32:], x[32:])
    assert set(masked[:32].flatten().tolist()) == {0.0, 1.0}
    assert len({tuple(row.tolist()) for row in masked[:32]}) > 1


def test_conv_inputs_get_one_mask_value_per_channel():
    torch.manual_seed(0)
    network = nn.Sequential(nn.Conv2d(3, 5, 3, padding=1), nn.ReLU(), nn.Conv2d(5, 2, 1))
    domain_masks = masks.DomainMasks(network, ["2"], 2, (3, 6, 6))
    assert domain_masks.logits[0].shape == (2, 5)
    set_probabilities(domain_masks, [[[0.5] * 5, [0.5] * 5]])
    seen = []
    network[2].register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    x = torch.randn(8, 3, 6, 6)
    with torch.no_grad(), domain_masks.per_example(torch.tensor([0, 1] * 4), "sample"):
        network(x)
    unmasked = network[1](network[0](x))
    kept = (seen[-1] == unmasked).flatten(2).all(-1)
    dropped = (seen[-1] == 0).flatten(2).all(-1)
    assert bool((kept | dropped).all()), "each channel is kept or dropped as a whole"


def test_averaged_prediction_is_the_mean_of_each_domains_soft_mask_logits():
    torch.manual_seed(0)
    network = TwoLayer()
    domain_masks = make_masks(network)
    first = torch.tensor([[0.25, 0.5, 0.75], [0.9, 0.1, 0.5], [0.6, 0.6, 0.6]])
    second = torch.tensor([[0.2, 0.4, 0.6, 0.8], [0.5] * 4, [0.9, 0.1, 0.9, 0.1]])
    set_probabilities(domain_masks, [first, second])
    x = torch.randn(5, 3)
    with torch.no_grad(), domain_masks.averaged():
        got = domain_masks.average_logits(network(x))
        expected = torch.stack([by_hand(network, x, first[d], second[d]) for d in range(3)]).mean(0)
    assert torch.allclose(got, expected, atol=1e-6)


def test_fold_equals_averaging_when_only_a_final_linear_layer_is_masked():
    torch.manual_seed(0)
    network = TwoLayer()
    expanded = make_masks(network, layers=("second",))
    probs = torch.tensor([[0.2, 0.4, 0.6, 0.8], [0.5] * 4, [0.9, 0.1, 0.9, 0.1]])
    set_probabilities(expanded, [probs])
    x = torch.randn(6, 3)
    with torch.no_grad(), expanded.averaged():
        averaged = expanded.average_logits(network(x))
    for handle in expanded._handles:
        handle.remove()
    folded = make_masks(network, layers=("second",), fold=True)
    set_probabilities(folded, [probs])
    with torch.no_grad(), folded.averaged():
        one_pass = folded.average_logits(network(x))
    assert torch.allclose(averaged, one_pass, atol=1e-6)


@pytest.mark.parametrize("mode", ["soft", "hard"])
def test_known_domain_prediction_uses_each_examples_own_mask(mode):
    torch.manual_seed(0)
    network = TwoLayer()
    domain_masks = make_masks(network)
    first = torch.tensor([[0.25, 0.5, 0.75], [0.9, 0.1, 0.6], [0.6, 0.6, 0.4]])
    second = torch.tensor([[0.2, 0.4, 0.6, 0.8], [0.7] * 4, [0.9, 0.1, 0.9, 0.1]])
    set_probabilities(domain_masks, [first, second])
    x = torch.randn(4, 3)
    domains = torch.tensor([2, 0, 1, 2])
    if mode == "hard":
        first, second = (first > 0.5).float(), (second > 0.5).float()
    with torch.no_grad(), domain_masks.per_example(domains, mode):
        got = network(x)
    expected = torch.stack(
        [by_hand(network, x[n], first[d], second[d]) for n, d in enumerate(domains.tolist())]
    )
    assert torch.allclose(got, expected, atol=1e-6)
