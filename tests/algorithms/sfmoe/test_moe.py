"""The sparse top-2 MoE layer: capacity, routing, balance loss, dispatch and evaluation. No
DomainBed needed."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dmg_domainbed.algorithms.sfmoe.moe import SparseMoE, balance_loss, expert_capacity, route

pytestmark = pytest.mark.no_domainbed

DIM, HIDDEN, EXPERTS = 8, 16, 4


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


def crowded_layer(**kwargs) -> tuple[SparseMoE, torch.Tensor]:
    """A small layer and tokens most of which prefer expert 0: experts overflow."""
    layer = SparseMoE(DIM, HIDDEN, EXPERTS, **kwargs)
    with torch.no_grad():
        layer.gate[:, 0] += 1.0
    x = (torch.randn(3, 20, DIM) + 1.0).requires_grad_()
    return layer, x


def test_capacity_is_61_slots_in_training_and_99_in_evaluation_for_198_tokens():
    assert expert_capacity(198, 4, 1.25) == 61
    assert expert_capacity(198, 4, 2.0) == 99
    assert expert_capacity(10, 4, 1.25) == 4  # never below 4 slots
    assert expert_capacity(198, 4, 8.0) == 198  # never more slots than tokens
    layer = SparseMoE(DIM, HIDDEN, 4)
    assert layer.capacity(198) == 61
    assert layer.eval().capacity(198) == 99


def test_slots_fill_in_token_order_top1_first_and_never_collide():
    logits = torch.randn(6, 198, EXPERTS) * 2
    logits[..., 0] += 1.5  # expert 0 overflows its 61 slots
    probabilities = logits.softmax(-1)
    routing = route(probabilities, capacity=61, second_policy="all")
    experts, kept, slots = routing.experts, routing.kept, routing.slots
    assert (experts[..., 0] != experts[..., 1]).all()
    assert (experts[..., 0] == probabilities.argmax(-1)).all()
    assert not kept[..., 0].all() and not kept[..., 1].all()  # both kinds were dropped
    for b in range(6):
        for e in range(EXPERTS):
            first = experts[b, :, 0] == e
            wanted = int(first.sum())
            # top-1: the first min(wanted, C) tokens in token order take slots 0, 1, ...
            filled = min(wanted, 61)
            assert slots[b, first, 0][:filled].tolist() == list(range(filled))
            assert kept[b, first, 0].tolist() == [True] * filled + [False] * (wanted - filled)
            # top-2 continue after the kept top-1 assignments, still in token order
            second = experts[b, :, 1] == e
            room = 61 - filled
            taken = min(int(second.sum()), room)
            assert slots[b, second, 1][:taken].tolist() == list(range(filled, filled + taken))
            assert int(kept[b, second, 1].sum()) == taken
            used = torch.cat(
                [slots[b, first & kept[b, :, 0], 0], slots[b, second & kept[b, :, 1], 1]]
            )
            assert len(set(used.tolist())) == len(used) <= 61


def test_balance_loss_is_001_when_routing_is_balanced_and_004_when_it_collapses():
    layer = SparseMoE(EXPERTS, HIDDEN, EXPERTS)
    with torch.no_grad():
        layer.gate.copy_(50 * torch.eye(EXPERTS))  # token e_i goes to expert i, p ~ one-hot
    balanced = torch.eye(EXPERTS).repeat(2, 10, 1)  # [2, 40, 4]: every expert gets 1/4
    layer(balanced)
    assert layer.balance.item() == pytest.approx(0.01, abs=1e-6)
    collapsed = torch.eye(EXPERTS)[:1].expand(2, 40, EXPERTS)  # every token to expert 0
    layer(collapsed)
    assert layer.balance.item() == pytest.approx(0.04, abs=1e-6)


def test_balance_loss_counts_first_choices_before_capacity():
    probabilities = torch.tensor([[[0.7, 0.1, 0.1, 0.1]] * 8])
    top1 = torch.zeros(1, 8, dtype=torch.long)
    # 16 * mean_e(p_e * share_e) = 16 * (0.7 * 1) / 4, whatever the capacity keeps
    assert balance_loss(probabilities, top1).item() == pytest.approx(2.8)


def reference_output(layer: SparseMoE, x: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """The layer written the plain way: one token, one expert, one slot at a time."""
    batch, tokens, _ = x.shape
    probabilities = torch.softmax(x @ layer.gate, -1)
    capacity = layer.capacity(tokens)
    w1, w2 = layer.experts.w1, layer.experts.w2
    outputs = []
    for b in range(batch):
        filled = [0] * layer.num_experts
        chosen = []
        for n in range(tokens):
            p = probabilities[b, n]
            order = sorted(range(layer.num_experts), key=lambda e: -p[e].item())
            if layer.top_k == 1:
                picks = [(order[0], p[order[0]])]
            else:
                total = p[order[0]] + p[order[1]] + 1e-9
                picks = [(order[0], p[order[0]] / total), (order[1], p[order[1]] / total)]
            chosen.append(picks)
        kept = [[False, False] for _ in range(tokens)]
        for n in range(tokens):  # all first choices, in token order
            e = chosen[n][0][0]
            if filled[e] < capacity:
                filled[e] += 1
                kept[n][0] = True
        if layer.top_k == 2:
            for n in range(tokens):  # then the second choices the policy keeps
                e, g2 = chosen[n][1]
                if uniforms[b, n] < g2 / layer.second_threshold and filled[e] < capacity:
                    filled[e] += 1
                    kept[n][1] = True
        for n in range(tokens):
            y = torch.zeros_like(x[b, n])
            for (e, gate), keep in zip(chosen[n], kept[n]):
                if keep:
                    y = y + gate * (F.gelu(x[b, n] @ w1[e]) @ w2[e])
            outputs.append(y)
    return torch.stack(outputs).view_as(x)


@pytest.mark.parametrize("top_k", [2, 1])
def test_dispatch_and_gradients_equal_a_plain_reference(top_k):
    layer, x = crowded_layer(top_k=top_k)
    torch.manual_seed(7)
    got = layer(x)
    torch.manual_seed(7)
    uniforms = torch.rand(x.shape[:2])  # what the layer drew for the random policy
    assert not layer.routing.kept[..., 0].all()  # the check covers dropped assignments
    expected = reference_output(layer, x, uniforms)
    assert torch.allclose(got, expected, atol=1e-5)
    weights = torch.randn_like(got)
    params = [x, layer.gate, layer.experts.w1, layer.experts.w2]
    grads = torch.autograd.grad((got * weights).sum(), params)
    expected_grads = torch.autograd.grad((expected * weights).sum(), params)
    for grad, expected_grad in zip(grads, expected_grads):
        assert torch.allclose(grad, expected_grad, atol=1e-5)


def test_evaluation_is_reproducible_and_keeps_the_random_second_expert_policy():
    layer, x = crowded_layer()
    layer.eval()
    with torch.no_grad():
        first, second = layer(x), layer(x)
        seeded_kept = layer.routing.kept[..., 1]
        layer.eval_seed = 1
        other = layer(x)
        other_kept = layer.routing.kept[..., 1]
    assert torch.equal(first, second)
    assert not torch.equal(seeded_kept, other_kept) and not torch.equal(first, other)
    # the policy still drops some second experts and keeps others
    assert 0 < seeded_kept.float().mean() < 1


def test_training_draws_new_second_expert_choices_every_forward():
    layer, x = crowded_layer()
    layer(x)
    kept = layer.routing.kept[..., 1]
    layer(x)
    assert not torch.equal(kept, layer.routing.kept[..., 1])


def test_forward_and_backward_read_no_data_to_shape_anything():
    """On the meta device tensors have shapes but no values: any step that reads values from
    the device (a GPU synchronisation, a data-dependent shape) fails there."""
    layer = SparseMoE(DIM, HIDDEN, EXPERTS).to("meta")
    x = torch.randn(3, 198, DIM, device="meta", requires_grad=True)
    y = layer(x)
    (y.sum() + layer.balance).backward()
    assert y.shape == x.shape and x.grad.shape == x.shape


def test_experts_copied_from_a_dense_mlp_with_every_token_kept_equal_that_mlp():
    fc1, fc2 = nn.Linear(DIM, HIDDEN), nn.Linear(HIDDEN, DIM)
    layer = SparseMoE(
        DIM, HIDDEN, EXPERTS, bias=True, second_policy="all", capacity_factor_train=EXPERTS
    )
    layer.experts.copy_dense(fc1, fc2)
    x = torch.randn(3, 20, DIM)
    dense = fc2(F.gelu(fc1(x)))
    assert torch.allclose(layer(x), dense, atol=1e-5)
    assert layer.routing.kept.all()
