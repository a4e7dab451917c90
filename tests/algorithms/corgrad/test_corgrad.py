"""CorGrad (Zhou et al., ECAI 2024): chunk projection, outlier blending, summed update."""

import copy
import json
import math
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F
from domainbed import algorithms
from torch import nn

from dmg_domainbed.algorithms.corgrad.chunks import chunk_layout
from dmg_domainbed.algorithms.corgrad.corgrad import (
    CorGrad,
    blend_outliers,
    corrected_parameters,
    corrected_update,
    project_conflicting_chunks,
)
from dmg_domainbed.errors import UserError
from tests.helpers import domainbed_script, one_loader_worker

from ..conftest import build, build_resnet18, minibatches


def flat(*domains):
    return torch.tensor(domains, dtype=torch.float32)


def applied(grads, layout, mixing):
    """The flat gradients ``[D, P]`` that ``mixing [C, D, D]`` makes of ``grads``."""
    return torch.stack([layout.combine(grads, mixing[:, d]) for d in range(len(grads))])


def projected(grads, layout):
    mixing, fraction, ratio = project_conflicting_chunks(layout.gram(grads), layout.rounding())
    return applied(grads, layout, mixing), fraction, ratio


def blended(grads, layout, alpha):
    """Step 2 alone, on gradients taken as they are."""
    identity = torch.eye(len(grads), dtype=torch.float64).repeat(layout.num_chunks, 1, 1)
    mixing, fraction = blend_outliers(layout.gram(grads), identity, layout, alpha)
    return applied(grads, layout, mixing), fraction


def previous_update(grads, shapes, n_parts, alpha):
    """The vectorised arithmetic this package used before the Gram matrices: the corrected
    gradients themselves, updated in place chunk by chunk in float32, per-chunk values spread
    over the elements by ``repeat_interleave``."""
    chunk_sizes, tensor_chunks, tensor_sizes = [], [], []
    for shape in shapes:
        pieces = torch.chunk(torch.zeros(shape).reshape(shape or (1,)), n_parts)
        chunk_sizes += [c.numel() for c in pieces]
        tensor_chunks.append(len(pieces))
        tensor_sizes.append(math.prod(shape))
    chunk_sizes, tensor_chunks, tensor_sizes = map(
        torch.tensor, (chunk_sizes, tensor_chunks, tensor_sizes)
    )

    def sums(values, lengths):
        return torch.segment_reduce(values, "sum", lengths=lengths)

    grads = grads.clone()
    count = len(grads)
    squares = torch.stack([sums(g * g, chunk_sizes) for g in grads])
    conflicts, ratio_sum, tiny = 0, 0.0, torch.finfo(grads.dtype).tiny
    for i in range(count):
        for p in range(count):
            if p == i:
                continue
            dots = sums(grads[i] * grads[p], chunk_sizes)
            conflict = dots < 0
            coefficient = torch.where(conflict, dots / squares[p].clamp_min(tiny), 0.0)
            ratio = -dots / (squares[p].sqrt() * squares[i].sqrt()).clamp_min(tiny)
            ratio_sum += torch.where(conflict, ratio, 0.0).sum().item()
            conflicts += conflict.sum().item()
            grads[i] -= coefficient.repeat_interleave(chunk_sizes) * grads[p]
            squares[i] = sums(grads[i] * grads[i], chunk_sizes)
    norms = (
        torch.stack([sums(sums(g * g, chunk_sizes), tensor_chunks) for g in grads]).double().sqrt()
    )
    deviation = (norms - norms.mean(0)).abs()
    outlier = deviation > norms.std(0, correction=0) + 16 * torch.finfo(
        norms.dtype
    ).eps * norms.amax(0)
    inlier = (~outlier).to(grads.dtype)
    weights = inlier / inlier.sum(0)
    mean = sum(w.repeat_interleave(tensor_sizes) * g for w, g in zip(weights, grads))
    total = sum(
        torch.where(o.repeat_interleave(tensor_sizes), alpha * g + (1 - alpha) * mean, g)
        for o, g in zip(outlier, grads)
    )
    stats = {
        "conflict_fraction": conflicts / (count * (count - 1) * len(chunk_sizes)),
        "projection_ratio": ratio_sum / max(conflicts, 1),
        "outlier_fraction": outlier.double().mean().item(),
    }
    return total, stats


def reference_update(grads, shapes, n_parts, alpha):
    """The rule written out with torch.chunk and loops, one parameter tensor at a time, and its
    statistics: the projections in exact rational arithmetic (in floats, a chunk projected
    against a collinear one leaves a residue of either sign where the rule leaves zero, and one
    made orthogonal to another has an inner product of either sign with it), the blending in
    float64."""
    total, ratios, outlier_count, chunk_count = [], [], 0, 0
    for index, shape in enumerate(shapes):
        start = sum(torch.Size(s).numel() for s in shapes[:index])
        tensors = [g[start : start + torch.Size(shape).numel()].reshape(shape) for g in grads]
        chunks = [
            [[Fraction(v) for v in c.flatten().tolist()] for c in torch.chunk(t, n_parts)]
            for t in tensors
        ]
        for i in range(len(tensors)):
            for j in range(len(chunks[i])):
                for p in range(len(tensors)):
                    if p == i:
                        continue
                    mine, theirs = chunks[i][j], chunks[p][j]
                    dot = sum(a * b for a, b in zip(mine, theirs))
                    if dot < 0:
                        square = sum(b * b for b in theirs)
                        ratios.append(-float(dot) / math.sqrt(square * sum(a * a for a in mine)))
                        chunks[i][j] = [a - dot / square * b for a, b in zip(mine, theirs)]
        chunk_count += len(chunks[0])
        tensors = [
            torch.tensor([float(v) for c in cs for v in c], dtype=torch.float64) for cs in chunks
        ]
        norms = torch.stack([t.norm() for t in tensors])
        # exactly one sigma (two domains) is no outlier, whatever the rounding
        sigma = norms.std(correction=0) + 1e-12 * norms.max()
        outliers = [bool((n - norms.mean()).abs() > sigma) for n in norms]
        outlier_count += sum(outliers)
        inlier_mean = torch.stack([t for t, o in zip(tensors, outliers) if not o]).mean(0)
        blended = [
            alpha * t + (1 - alpha) * inlier_mean if o else t for t, o in zip(tensors, outliers)
        ]
        total.append(torch.stack(blended).sum(0).float())
    domains = len(grads)
    stats = {
        "conflict_fraction": len(ratios) / (domains * (domains - 1) * chunk_count),
        "projection_ratio": sum(ratios) / max(len(ratios), 1),
        "outlier_fraction": outlier_count / (domains * len(shapes)),
    }
    return torch.cat(total), stats


def test_registered_in_domainbed():
    assert algorithms.get_algorithm_class("CorGrad") is CorGrad
    assert "CorGrad" in algorithms.ALGORITHMS


@pytest.mark.parametrize("shape, n_parts", [((12, 3), 10), ((5,), 2), ((64, 8, 3, 3), 10), ((), 4)])
def test_chunks_are_torch_chunk_along_dim_0(shape, n_parts):
    layout = chunk_layout([(7, 2), shape], n_parts)
    first = [len(c) for c in torch.chunk(torch.zeros(7, 2), n_parts)]
    second = [len(c) for c in torch.chunk(torch.zeros(shape).reshape(shape or (1,)), n_parts)]
    assert layout.chunk_rows.tolist() == first + second
    assert layout.tensor_chunks.tolist() == [len(first), len(second)]
    rows = 1 if shape == () else shape[0]
    assert layout.matrices == ((7, 2), (rows, math.prod(shape) // rows))
    chunk_of_row = [j for j, n in enumerate(first + second) for _ in range(n)]
    assert layout.row_chunk.tolist() == chunk_of_row


def test_projection_only_on_conflicting_chunks():
    # One 2x2 tensor in two chunks (rows). Row 0 conflicts (<[1,0],[-1,1]> = -1), row 1 does not.
    grads = flat([1, 0, 1, 0], [-1, 1, 1, 1])
    projected_grads, fraction, ratio = projected(grads, chunk_layout([(2, 2)], 2))
    # g_0^0 - (-1 / 2) [-1, 1] = [0.5, 0.5]; domain 1 then meets a corrected chunk at 90 degrees.
    assert torch.equal(projected_grads, flat([0.5, 0.5, 1, 0], [-1, 1, 1, 1]))
    assert fraction.item() == pytest.approx(1 / 4)  # 1 conflict among 2 ordered pairs x 2 chunks
    assert ratio.item() == pytest.approx(2**-0.5)  # ||projection|| / ||g_0^0|| = |cos 135 deg|


def test_projection_goes_domain_by_domain_against_already_corrected_gradients():
    grads = flat([1, 0], [0, 1], [-1, -1])
    projected_grads, fraction, _ = projected(grads, chunk_layout([(2,)], 1))
    # g_0 meets g_2: [1,0] + 0.5 [-1,-1] = [0.5,-0.5]. g_1 is orthogonal to the ORIGINAL g_0 but
    # conflicts with the corrected one: [0,1] + [0.5,-0.5] = [0.5,0.5]; then with g_2: [0,0].
    assert torch.allclose(projected_grads, flat([0.5, -0.5], [0, 0], [-1, -1]))
    assert fraction.item() == pytest.approx(3 / 6)


def test_outliers_are_one_population_std_from_the_mean_norm_and_blended_with_the_inliers():
    # Norms 0, 2, 3: mean 5/3, population std 1.247 (sample std 1.528): 0 and 3 are outliers.
    grads = flat([0, 0, 1, 1], [2, 0, 1, 1], [0, 3, 1, 1])
    layout = chunk_layout([(2,), (2,)], 10)  # the second tensor has equal norms: no outlier
    result, fraction = blended(grads, layout, alpha=0.6)
    assert torch.allclose(result, flat([0.8, 0, 1, 1], [2, 0, 1, 1], [0.8, 1.8, 1, 1]))
    assert fraction.item() == pytest.approx(2 / 6)


def test_two_domains_are_never_outliers():
    grads = flat([1, 0], [0, 50])
    result, fraction = blended(grads, chunk_layout([(2,)], 1), alpha=0.0)
    assert torch.equal(result, grads) and fraction.item() == 0


def test_update_is_the_sum_over_domains_of_the_corrected_gradients():
    grads = flat([1, 0, 1, 0], [-1, 1, 1, 1])
    update, stats = corrected_update(grads, chunk_layout([(2, 2)], 2), alpha=0.6)
    assert torch.equal(update, flat([0.5, 0.5, 1, 0], [-1, 1, 1, 1]).sum(0))
    assert set(stats) == {"conflict_fraction", "projection_ratio", "outlier_fraction"}


def test_vectorised_rule_matches_the_rule_written_out_per_tensor_and_chunk():
    shapes = [(12, 3), (7,), (4, 3, 2, 2), (1, 5)]
    size = sum(torch.Size(s).numel() for s in shapes)
    grads = torch.randn(4, size, generator=torch.Generator().manual_seed(0))
    update, stats = corrected_update(grads, chunk_layout(shapes, 5), alpha=0.3)
    expected, expected_stats = reference_update(grads, shapes, 5, 0.3)
    assert torch.allclose(update, expected, atol=1e-5)
    assert {k: v.item() for k, v in stats.items()} == pytest.approx(expected_stats, rel=1e-5)


# A small network's tensors: conv weights and biases, a norm layer's, a classifier's, every chunk
# of more elements than there are domains: no chunk is collinear with another by construction.
NETWORK_SHAPES = [(8, 3, 3, 3), (32,), (16, 8, 3, 3), (32,), (32,), (7, 16)]


def domain_gradients(domains: int, size: int, seed: int) -> torch.Tensor:
    """Random gradients, of unequal norms per domain as real domains have: outliers among them."""
    generator = torch.Generator().manual_seed(seed)
    scales = torch.rand(domains, 1, generator=generator) * 3 + 0.1
    return torch.randn(domains, size, generator=generator) * scales


@pytest.mark.parametrize("domains", [2, 3, 5])
@pytest.mark.parametrize("seed", range(3))
def test_the_gram_arithmetic_gives_the_previous_arithmetics_update_and_statistics(domains, seed):
    n_parts = 4
    grads = domain_gradients(domains, sum(math.prod(s) for s in NETWORK_SHAPES), seed)
    update, stats = corrected_update(grads, chunk_layout(NETWORK_SHAPES, n_parts), alpha=0.6)
    previous, previous_stats = previous_update(grads, NETWORK_SHAPES, n_parts, alpha=0.6)
    assert torch.allclose(update, previous, rtol=1e-5, atol=1e-5 * previous.abs().max())
    assert stats["outlier_fraction"].item() == pytest.approx(previous_stats["outlier_fraction"])
    # The previous arithmetic also counted, as conflicts, about half of the pairs made
    # orthogonal by a projection (float inner products of either sign); exact arithmetic not.
    # (An inner product within rounding of zero counts as none: one triple at most here.)
    _, exact = reference_update(grads, NETWORK_SHAPES, n_parts, alpha=0.6)
    triples = domains * (domains - 1) * chunk_layout(NETWORK_SHAPES, n_parts).num_chunks
    assert abs(stats["conflict_fraction"].item() - exact["conflict_fraction"]) <= 1 / triples
    assert stats["projection_ratio"].item() == pytest.approx(exact["projection_ratio"], rel=0.01)
    assert 0 < stats["conflict_fraction"] < previous_stats["conflict_fraction"] < 1


@pytest.mark.parametrize("seed", range(3))
def test_chunks_of_fewer_elements_than_domains_follow_exact_arithmetic(seed):
    """Two-element chunks of five domains: corrected chunks become collinear, some exactly zero
    (the previous float32 arithmetic differed from exact arithmetic there by whole units)."""
    shapes = [(8, 3, 3, 3), (8,), (7,)]
    grads = domain_gradients(5, sum(math.prod(s) for s in shapes), seed)
    update, _ = corrected_update(grads, chunk_layout(shapes, 4), alpha=0.6)
    expected, _ = reference_update(grads, shapes, 4, alpha=0.6)
    assert torch.allclose(update, expected, atol=1e-4 * expected.abs().max())


def test_a_one_element_chunk_projected_to_zero_is_zero_for_the_next_domains():
    # One chunk of one element: g_0 = 3 conflicts with g_1 = -7 and becomes exactly 0, which
    # conflicts with nothing, so g_1 keeps its value and then meets g_2 = 1 (a conflict): 0.
    # (In float32, 3 - (3 * -7 / 49) * -7 is 0 or a residue of either sign depending on the
    # values; a residue of the sign opposite to g_1 would have zeroed g_1 instead.)
    grads = flat([3.0], [-7.0], [1.0])
    projected_grads, fraction, _ = projected(grads, chunk_layout([(1,)], 1))
    assert projected_grads.flatten().tolist() == [0.0, 0.0, 1.0]
    assert fraction.item() == pytest.approx(2 / 6)


def test_the_layout_costs_entries_per_row_chunk_and_tensor_not_one_per_weight():
    corgrad = build("CorGrad", n_parts=4)
    layout = [b for name, b in corgrad.named_buffers() if not name.startswith("network.")]
    params = list(corgrad.network.parameters())
    rows = sum(len(p) if p.dim() else 1 for p in params)
    weights = sum(p.numel() for p in params)
    assert sum(b.numel() for b in layout) <= 2 * rows + 5 * len(params) < weights / 20


def test_conv_linear_set_leaves_out_normalisation_layers_and_all_takes_everything():
    network = build("CorGrad").network
    conv_linear = corrected_parameters(network, "conv_linear")
    expected = [
        p
        for m in network.modules()
        if isinstance(m, (nn.Conv2d, nn.Linear))
        for p in m.parameters(recurse=False)
    ]
    assert [id(p) for p in conv_linear] == [id(p) for p in expected]
    assert len(corrected_parameters(network, "all")) == len(list(network.parameters()))
    assert any(isinstance(m, nn.GroupNorm) for m in network.modules())


@pytest.mark.parametrize("which", ["conv_linear", "all"])
def test_adam_receives_corrected_sum_and_plain_sum_elsewhere(which):
    corgrad = build("CorGrad", corrected_params=which, n_parts=4, alpha=0.6)
    batches = minibatches()
    params = list(corgrad.network.parameters())
    per_domain = [
        torch.autograd.grad(nn.functional.cross_entropy(corgrad.network(x), y), params)
        for x, y in batches
    ]
    corrected = {id(p) for p in corrected_parameters(corgrad.network, which)}
    chosen = [k for k, p in enumerate(params) if id(p) in corrected]
    grads = torch.stack([torch.cat([g[k].reshape(-1) for k in chosen]) for g in per_domain])
    layout = chunk_layout([params[k].shape for k in chosen], 4)
    expected, stats = corrected_update(grads, layout, 0.6)

    logged = corgrad.update(batches)

    given = torch.cat([params[k].grad.reshape(-1) for k in chosen])
    assert torch.allclose(given, expected, atol=1e-6)
    for k, p in enumerate(params):
        if id(p) not in corrected:
            assert torch.allclose(p.grad, sum(g[k] for g in per_domain), atol=1e-6)
    assert logged["conflict_fraction"] == pytest.approx(stats["conflict_fraction"].item())
    assert 0 < logged["conflict_fraction"] < 1 and 0 < logged["projection_ratio"] <= 1


def test_training_lowers_the_loss_on_the_source_domains():
    corgrad = build("CorGrad", input_shape=(10,), lr=1e-2, mlp_width=64, mlp_dropout=0.0)
    batches = minibatches(input_shape=(10,), batch=16)
    first = corgrad.update(batches)["loss"]
    for _ in range(30):
        last = corgrad.update(batches)["loss"]
    assert last < first / 2


def test_one_source_domain_has_no_conflicts_and_no_outliers():
    logged = build("CorGrad", num_domains=1).update(minibatches(num_domains=1))
    assert logged["conflict_fraction"] == logged["outlier_fraction"] == 0


@pytest.mark.parametrize(
    "hparams, message",
    [
        ({"n_parts": 0}, r"'n_parts' = 0 is not valid: it must be an integer >= 1"),
        ({"n_parts": 2.5}, r"'n_parts' = 2.5 is not valid: it must be an integer >= 1, not float"),
        ({"alpha": 1.5}, r"'alpha' = 1.5 is not valid: it must be a number between 0 and 1"),
        (
            {"corrected_params": "bn"},
            r"'corrected_params' = 'bn' is not valid: it must be one of 'conv_linear', 'all'",
        ),
    ],
)
def test_bad_hparams_fail_at_construction(hparams, message):
    with pytest.raises(UserError, match=message):
        build("CorGrad", **hparams)


def test_domainbed_train_script_runs_corgrad_and_logs_its_statistics(tmp_path):
    args = ["--algorithm", "CorGrad", "--dataset", "Debug28", "--data_dir", str(tmp_path)]
    args += ["--hparams", json.dumps({"batch_size": 8}), "--steps", "5"]
    with one_loader_worker():
        domainbed_script("train", *args, "--output_dir", str(tmp_path / "out"))
    assert (tmp_path / "out" / "done").exists()
    lines = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert records[-1]["step"] == 4
    assert records[-1]["hparams"]["n_parts"] == 10 and records[-1]["hparams"]["alpha"] == 0.6
    for key in ("conflict_fraction", "projection_ratio", "outlier_fraction"):
        assert 0 <= records[-1][key] <= 1


def test_batchnorm_is_frozen_with_its_statistics_as_the_authors_ran_it(random_resnet18):
    corgrad = build_resnet18("CorGrad", num_domains=2)
    corgrad.train()
    # DomainBed's ResNet pools adaptively: 32x32 images run every layer at a fraction of the cost
    batches = minibatches(2, 2, input_shape=(3, 32, 32), num_classes=7)
    reference = copy.deepcopy(corgrad.network).eval()  # eval: BatchNorm uses running statistics
    with torch.no_grad():
        expected = torch.stack([F.cross_entropy(reference(x), y) for x, y in batches]).mean()
    norms = [m for m in corgrad.network.modules() if isinstance(m, nn.BatchNorm2d)]
    statistics = [m.running_mean.clone() for m in norms]

    logged = corgrad.update(batches)

    assert logged["loss"] == pytest.approx(expected.item(), rel=1e-5)
    assert all(torch.equal(m.running_mean, s) for m, s in zip(norms, statistics))


def test_freeze_bn_false_restores_domainbeds_minibatch_statistics(random_resnet18):
    corgrad = build_resnet18("CorGrad", freeze_bn=False)
    corgrad.train()
    norms = [m for m in corgrad.network.modules() if isinstance(m, nn.BatchNorm2d)]
    assert norms and all(m.training for m in norms)


def test_default_corrects_conv_batchnorm_and_linear_as_the_published_commands(random_resnet18):
    corgrad = build_resnet18("CorGrad")
    authors = [
        p
        for m in corgrad.network.modules()
        if isinstance(m, (nn.Conv2d, nn.BatchNorm2d, nn.Linear))
        for p in m.parameters(recurse=False)
    ]
    corrected = corrected_parameters(corgrad.network, corgrad.hparams["corrected_params"])
    assert {id(p) for p in corrected} == {id(p) for p in authors}
    assert any(isinstance(m, nn.BatchNorm2d) for m in corgrad.network.modules())


def test_adam_gets_gradients_in_the_memory_format_of_the_weights_in_bf16():
    """bf16 puts the conv weights in channels_last: gradients of other strides would make a
    GPU's Adam run its foreach kernels tensor by tensor."""
    corgrad = build("CorGrad", precision="bf16")
    corgrad.update(minibatches())
    params = list(corgrad.network.parameters())
    assert any(p.dim() == 4 and not p.is_contiguous() for p in params)  # channels_last
    assert [p.grad.stride() for p in params] == [p.stride() for p in params]


def test_gradients_set_to_none_between_steps_are_given_again():
    corgrad = build("CorGrad", n_parts=4)
    corgrad.update(minibatches())
    corgrad.network.zero_grad(set_to_none=True)
    before = [p.detach().clone() for p in corgrad.network.parameters()]
    corgrad.update(minibatches())
    params = list(corgrad.network.parameters())
    assert all(p.grad is not None for p in params)
    assert all(not torch.equal(p, b) for p, b in zip(params, before) if p.grad.any())
