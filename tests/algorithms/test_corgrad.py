"""CorGrad (Zhou et al., ECAI 2024): chunk projection, outlier blending, summed update."""

import copy
import json
import math

import pytest
import torch
import torch.nn.functional as F
from domainbed import algorithms
from torch import nn

from dmg_domainbed.algorithms.corgrad import (
    CorGrad,
    blend_outliers,
    chunk_layout,
    corrected_parameters,
    corrected_update,
    project_conflicting_chunks,
)
from dmg_domainbed.errors import UserError
from tests.helpers import domainbed_script, one_loader_worker

from .conftest import build, build_resnet18, minibatches


def flat(*domains):
    return torch.tensor(domains, dtype=torch.float32)


def reference_update(grads, shapes, n_parts, alpha):
    """The rule written out with torch.chunk and loops, one parameter tensor at a time."""
    total = []
    for index, shape in enumerate(shapes):
        start = sum(torch.Size(s).numel() for s in shapes[:index])
        tensors = [
            g[start : start + torch.Size(shape).numel()].reshape(shape).clone() for g in grads
        ]
        chunks = [torch.chunk(t, n_parts) for t in tensors]
        for i in range(len(tensors)):
            for j in range(len(chunks[i])):
                for p in range(len(tensors)):
                    if p == i:
                        continue
                    dot = (chunks[i][j] * chunks[p][j]).sum()
                    if dot < 0:
                        chunks[i][j].sub_(dot / (chunks[p][j] ** 2).sum() * chunks[p][j])
        norms = torch.stack([t.norm() for t in tensors])
        outliers = [(n - norms.mean()).abs() > norms.std(correction=0) for n in norms]
        inlier_mean = torch.stack([t for t, o in zip(tensors, outliers) if not o]).mean(0)
        blended = [
            alpha * t + (1 - alpha) * inlier_mean if o else t for t, o in zip(tensors, outliers)
        ]
        total.append(torch.stack(blended).sum(0).reshape(-1))
    return torch.cat(total)


def test_registered_in_domainbed():
    assert algorithms.get_algorithm_class("CorGrad") is CorGrad
    assert "CorGrad" in algorithms.ALGORITHMS


@pytest.mark.parametrize("shape, n_parts", [((12, 3), 10), ((5,), 2), ((64, 8, 3, 3), 10), ((), 4)])
def test_chunks_are_torch_chunk_along_dim_0(shape, n_parts):
    layout = chunk_layout([(7, 2), shape], n_parts)
    first = [c.numel() for c in torch.chunk(torch.zeros(7, 2), n_parts)]
    second = [c.numel() for c in torch.chunk(torch.zeros(shape).reshape(shape or (1,)), n_parts)]
    assert layout.chunk_sizes.tolist() == first + second
    assert layout.tensor_chunks.tolist() == [len(first), len(second)]
    assert layout.tensor_sizes.tolist() == [14, math.prod(shape)]


def test_projection_only_on_conflicting_chunks():
    # One 2x2 tensor in two chunks (rows). Row 0 conflicts (<[1,0],[-1,1]> = -1), row 1 does not.
    grads = flat([1, 0, 1, 0], [-1, 1, 1, 1])
    projected, fraction, ratio = project_conflicting_chunks(grads, chunk_layout([(2, 2)], 2))
    # g_0^0 - (-1 / 2) [-1, 1] = [0.5, 0.5]; domain 1 then meets a corrected chunk at 90 degrees.
    assert torch.equal(projected, flat([0.5, 0.5, 1, 0], [-1, 1, 1, 1]))
    assert fraction.item() == pytest.approx(1 / 4)  # 1 conflict among 2 ordered pairs x 2 chunks
    assert ratio.item() == pytest.approx(2**-0.5)  # ||projection|| / ||g_0^0|| = |cos 135 deg|


def test_projection_goes_domain_by_domain_against_already_corrected_gradients():
    grads = flat([1, 0], [0, 1], [-1, -1])
    projected, fraction, _ = project_conflicting_chunks(grads, chunk_layout([(2,)], 1))
    # g_0 meets g_2: [1,0] + 0.5 [-1,-1] = [0.5,-0.5]. g_1 is orthogonal to the ORIGINAL g_0 but
    # conflicts with the corrected one: [0,1] + [0.5,-0.5] = [0.5,0.5]; then with g_2: [0,0].
    assert torch.allclose(projected, flat([0.5, -0.5], [0, 0], [-1, -1]))
    assert fraction.item() == pytest.approx(3 / 6)


def test_outliers_are_one_population_std_from_the_mean_norm_and_blended_with_the_inliers():
    # Norms 0, 2, 3: mean 5/3, population std 1.247 (sample std 1.528): 0 and 3 are outliers.
    grads = flat([0, 0, 1, 1], [2, 0, 1, 1], [0, 3, 1, 1])
    layout = chunk_layout([(2,), (2,)], 10)  # the second tensor has equal norms: no outlier
    blended, fraction = blend_outliers(grads, layout, alpha=0.6)
    assert torch.allclose(blended, flat([0.8, 0, 1, 1], [2, 0, 1, 1], [0.8, 1.8, 1, 1]))
    assert fraction.item() == pytest.approx(2 / 6)


def test_two_domains_are_never_outliers():
    grads = flat([1, 0], [0, 50])
    blended, fraction = blend_outliers(grads, chunk_layout([(2,)], 1), alpha=0.0)
    assert torch.equal(blended, grads) and fraction.item() == 0


def test_update_is_the_sum_over_domains_of_the_corrected_gradients():
    grads = flat([1, 0, 1, 0], [-1, 1, 1, 1])
    update, stats = corrected_update(grads, chunk_layout([(2, 2)], 2), alpha=0.6)
    assert torch.equal(update, flat([0.5, 0.5, 1, 0], [-1, 1, 1, 1]).sum(0))
    assert set(stats) == {"conflict_fraction", "projection_ratio", "outlier_fraction"}


def test_vectorised_rule_matches_the_rule_written_out_per_tensor_and_chunk():
    shapes = [(12, 3), (7,), (4, 3, 2, 2), (1, 5)]
    grads = torch.randn(4, sum(torch.Size(s).numel() for s in shapes))
    update, _ = corrected_update(grads, chunk_layout(shapes, 5), alpha=0.3)
    assert torch.allclose(update, reference_update(grads, shapes, 5, 0.3), atol=1e-5)


def test_the_layout_costs_one_entry_per_chunk_and_tensor_not_one_per_weight():
    corgrad = build("CorGrad", n_parts=4)
    layout = [b for name, b in corgrad.named_buffers() if not name.startswith("network.")]
    tensors = len(list(corgrad.network.parameters()))
    weights = sum(p.numel() for p in corgrad.network.parameters())
    assert sum(b.numel() for b in layout) <= 4 * tensors + 2 * tensors < weights / 100


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
