"""ImportanceMask: per-domain copies, importance and masks, per-weight rates, freezing."""

import copy
import json
import math

import pytest
import torch
import torch.nn.functional as F
from domainbed import algorithms

from dmg_domainbed.algorithms.importance_mask import grouped, importance_mask
from dmg_domainbed.algorithms.importance_mask.importance_mask import (
    ImportanceMask,
    apply_rates,
    linear_quantile,
    normalise,
    top_fraction,
    unimportant_rate,
    weight_importance,
)
from dmg_domainbed.errors import UserError
from tests.helpers import domainbed_script, one_loader_worker

from ..conftest import build, build_resnet18, minibatches
from ..torch_calls import TorchCalls

SHORT = {"phase1_steps": 2, "freeze_step": 4}


def tracked(importance_mask):
    return importance_mask._flat(importance_mask.network).detach().clone()


def test_registered_in_domainbed():
    assert algorithms.get_algorithm_class("ImportanceMask") is ImportanceMask
    assert "ImportanceMask" in algorithms.ALGORITHMS


def test_importance_is_the_movement_summed_over_domains():
    initial = torch.tensor([0.0, 1.0, 2.0])
    finals = torch.tensor([[1.0, 1.0, 2.0], [0.0, 3.0, 0.0]])
    assert torch.equal(weight_importance(initial, finals), torch.tensor([1.0, 2.0, 2.0]))


def test_normalisation_is_one_global_min_max():
    assert torch.equal(normalise(torch.tensor([1.0, 2.0, 5.0])), torch.tensor([0, 0.25, 1]))
    assert torch.equal(normalise(torch.full((4,), 3.0)), torch.full((4,), 0.5))


def test_threshold_keeps_the_top_fraction_with_ties_at_the_threshold():
    scores = torch.tensor([0.1, 0.9, 0.5, 0.3, 0.7])
    assert top_fraction(scores, 0.6).tolist() == [False, True, True, False, True]
    assert top_fraction(torch.tensor([1.0, 1.0, 0.0, 0.0]), 0.25).tolist() == [1, 1, 0, 0]
    assert top_fraction(scores, 0.0).tolist() == [False, True, False, False, False]
    assert top_fraction(scores, 1.0).all()


@pytest.mark.parametrize("fraction", [0.6, 0.4, 0.75, 0.33])
def test_threshold_is_the_authors_quantile_rule(fraction):
    generator = torch.Generator().manual_seed(0)
    for n in range(1, 200):
        scores = torch.rand(n, generator=generator)
        authors = scores >= torch.quantile(scores, 1 - fraction)
        assert torch.equal(top_fraction(scores, fraction), authors), n
        if not (fraction * (n - 1)).is_integer():  # else float rounding may keep one fewer
            assert int(authors.sum()) == math.floor(fraction * (n - 1)) + 1, n
        tied = scores.mul(4).round()  # many ties at the threshold
        assert torch.equal(top_fraction(tied, fraction), tied >= torch.quantile(tied, 1 - fraction))
    # e.g. 7 weights at 0.6: the quantile keeps 4, ceil(0.6 * 7) would be 5
    assert int(top_fraction(torch.arange(7.0), 0.6).sum()) == 4


def test_threshold_is_whatever_torch_quantile_gives_on_this_torch(monkeypatch):
    # another torch version's arithmetic, imitated: the kept weights must follow torch.quantile
    quantile = torch.quantile
    monkeypatch.setattr(torch, "quantile", lambda t, q: quantile(t, q, interpolation="lower"))
    scores = torch.rand(10, generator=torch.Generator().manual_seed(0))
    threshold = quantile(scores, 0.4, interpolation="lower")
    assert torch.equal(top_fraction(scores, 0.6), scores >= threshold)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_quantile_of_tensors_too_large_for_torch_quantile_is_torch_quantile(dtype, monkeypatch):
    """``linear_quantile`` does the arithmetic of recent ``torch.quantile``; releases round the
    rank differently (torch 2.1 and 2.14 differ in the last bits), so it agrees within float
    tolerance on every supported torch."""
    generator = torch.Generator().manual_seed(1)
    for n in range(1, 120):
        scores = torch.rand(n, generator=generator, dtype=dtype)
        for values in (scores, scores.mul(4).round()):
            for q in (0.0, 0.25, 0.33, 0.4, 0.6, 0.67, 1.0):
                expected = torch.quantile(values, q)
                torch.testing.assert_close(linear_quantile(values, q), expected, msg=str((n, q)))
    monkeypatch.setattr(importance_mask, "QUANTILE_MAX_ELEMENTS", 0)  # every tensor "too large"
    scores = torch.rand(7, 9, generator=generator, dtype=dtype)
    for fraction in (0.4, 0.6, 0.75):
        expected = scores >= linear_quantile(scores.reshape(-1), 1 - fraction)
        assert torch.equal(top_fraction(scores, fraction), expected)


def test_quantile_interpolates_on_the_device_of_the_scores():
    # the meta device stands in for a GPU: every operand of the interpolation must live there
    try:
        torch.empty(3, device="meta").kthvalue(1)
    except NotImplementedError:
        pytest.skip(
            f"torch {torch.__version__} has no meta kernel for kthvalue (torch 2.1 lacks it)"
        )
    with TorchCalls() as calls:
        linear_quantile(torch.empty(50, device="meta"), 0.4)
    lerps = calls.named("lerp")
    assert lerps and all(arg.device.type == "meta" for _, args in lerps for arg in args)


def test_the_phase_is_decided_without_reading_the_step_count_back_from_its_device():
    model = build("ImportanceMask", **SHORT)
    with TorchCalls() as calls:
        for _ in range(SHORT["freeze_step"] + 1):
            model.update(minibatches())
    reads = calls.host_reads()
    assert not [name for name, args in reads if any(a is model.update_count for a in args)]
    assert int(model.update_count) == SHORT["freeze_step"] + 1


def test_a_reloaded_model_resumes_its_schedule_at_the_saved_step():
    model = build("ImportanceMask", **SHORT)
    model.update(minibatches())
    fresh = build("ImportanceMask", **SHORT)
    fresh.load_state_dict(model.state_dict())
    assert fresh.in_phase1
    fresh.update(minibatches())  # the saved step 1 is phase 1's last (phase1_steps = 2)
    assert not fresh.in_phase1


def test_unimportant_rate_decays_exponentially_then_is_zero_from_the_freeze_step():
    def rate(step):
        return unimportant_rate(step, phase1_steps=100, freeze_step=400, factor=0.1, half_life=50)

    assert rate(100) == pytest.approx(0.1)
    assert rate(150) == pytest.approx(0.05)
    assert rate(300) == pytest.approx(0.1 / 16)
    assert rate(400) == rate(1000) == 0.0


def test_rates_scale_the_step_and_zero_keeps_the_weight_exactly():
    before, after = torch.tensor([1.0, 1.0, 1.0]), torch.tensor([1.3, 0.5, 7.1])
    moved = apply_rates(before, after, torch.tensor([1.0, 0.1, 0.0]))
    assert moved[0] == after[0] and moved[2] == before[2]
    assert moved[1].item() == pytest.approx(0.95)


def test_phase1_copies_share_one_initialisation_and_phase2_starts_from_a_fresh_one():
    model = build("ImportanceMask")
    states = [net.state_dict() for net in model.domain_networks]
    assert len(states) == 3
    assert all(torch.equal(states[0][k], s[k]) for s in states for k in s)
    assert not torch.equal(states[0]["classifier.weight"], model.network.classifier.weight)
    assert torch.equal(
        model.initial_weights,
        torch.cat([states[0]["classifier.weight"].reshape(-1), states[0]["classifier.bias"]]),
    )


def test_each_copy_trains_on_its_own_domain_only():
    model = build("ImportanceMask")
    twin = copy.deepcopy(model)
    batches = minibatches()
    changed = list(batches)
    changed[1] = (torch.randn_like(batches[1][0]), batches[1][1])
    model.update(batches)
    twin.update(changed)
    same = [
        all(torch.equal(a, b) for a, b in zip(m.parameters(), t.parameters(), strict=True))
        for m, t in zip(model.domain_networks, twin.domain_networks, strict=True)
    ]
    assert same == [True, False, True]


def test_importance_and_masks_come_from_the_copies_at_the_end_of_phase1():
    model = build("ImportanceMask", phase1_steps=1, important_fraction=0.25)
    batches = minibatches()
    replay = copy.deepcopy(model)
    replay._phase1_update(batches)
    finals = torch.stack([replay._flat(net) for net in replay.domain_networks]).detach()

    assert model.update(batches)["phase"] == 1.0
    assert len(model.domain_networks) == 0, "the copies are dropped once importance is known"
    expected = normalise(weight_importance(model.initial_weights, finals))
    assert torch.allclose(model.importance, expected)
    assert model.importance.min() == 0 and model.importance.max() == 1
    assert torch.equal(model.important, top_fraction(expected, 0.25))
    assert model.importance[model.important].min() >= model.importance[~model.important].max()


def test_phase2_gives_unimportant_weights_a_scaled_adam_step_and_others_the_full_one():
    model = build("ImportanceMask", phase1_steps=1, freeze_step=100, unimportant_lr_factor=0.1)
    model.update(minibatches())
    reference = copy.deepcopy(model.network)
    optimizer = torch.optim.Adam(
        reference.parameters(), lr=model.hparams["lr"], weight_decay=model.hparams["weight_decay"]
    )
    batches = minibatches()
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    before = tracked(model)

    logged = model.update(batches)
    F.cross_entropy(reference(x), y).backward()
    optimizer.step()

    assert logged["phase"] == 2.0 and logged["unimportant_rate"] == pytest.approx(0.1)
    adam_step = torch.cat([reference.classifier.weight.reshape(-1), reference.classifier.bias])
    adam_step = adam_step.detach() - before
    step = tracked(model) - before
    important = model.important
    assert torch.allclose(step[important], adam_step[important], atol=1e-7)
    assert torch.allclose(step[~important], 0.1 * adam_step[~important], atol=1e-7)
    assert (adam_step[~important] != 0).all()
    for name, param in reference.featurizer.named_parameters():
        assert torch.allclose(model.network.featurizer.get_parameter(name), param, atol=1e-7)


def test_unimportant_weights_do_not_change_from_the_freeze_step_on():
    model = build("ImportanceMask", **SHORT)
    for _ in range(SHORT["freeze_step"]):
        model.update(minibatches())
    at_freeze = tracked(model)
    for _ in range(3):
        assert model.update(minibatches())["unimportant_rate"] == 0.0
    after = tracked(model)
    assert torch.equal(after[~model.important], at_freeze[~model.important])
    assert (after[model.important] != at_freeze[model.important]).all()


def test_predict_averages_the_copies_in_phase1_and_uses_the_new_network_in_phase2():
    model = build("ImportanceMask", **SHORT).eval()
    x = torch.randn(5, 3, 28, 28)
    copies = torch.stack([net(x) for net in model.domain_networks]).mean(0)
    assert torch.allclose(model.predict(x), copies)
    for _ in range(3):
        model.update(minibatches())
    assert torch.equal(model.predict(x), model.network(x))


def test_tracked_layers_are_a_hparam_and_maps_have_the_shapes_of_their_weights():
    model = build("ImportanceMask", importance_layers=["featurizer.conv4", "classifier"])
    maps = model.importance_maps()
    assert list(maps) == [
        "featurizer.conv4.weight",
        "featurizer.conv4.bias",
        "classifier.weight",
        "classifier.bias",
    ]
    for name, value in maps.items():
        assert value.shape == model.network.get_parameter(name).shape
    assert {k: v.dtype for k, v in model.importance_masks().items()} == dict.fromkeys(
        maps, torch.bool
    )


def test_state_dict_after_phase1_loads_into_a_fresh_model():
    model = build("ImportanceMask", **SHORT)
    for _ in range(3):
        model.update(minibatches())
    state = model.state_dict()
    assert not any(k.startswith("domain_networks.") for k in state)
    fresh = build("ImportanceMask", **SHORT)
    fresh.load_state_dict(state)
    model.eval(), fresh.eval()
    x = torch.randn(3, 3, 28, 28)
    assert torch.equal(fresh.predict(x), model.predict(x))
    assert torch.equal(fresh.important, model.important) and int(fresh.update_count) == 3


@pytest.mark.parametrize(
    "hparams, message",
    [
        ({"phase1_steps": 0}, r"'phase1_steps' = 0 is not valid: it must be an integer >= 1\."),
        ({"phase1_steps": 10, "freeze_step": 5}, r"'freeze_step' \(5\) must be >= 'phase1_steps'"),
        (
            {"important_fraction": 1.5},
            r"'important_fraction' = 1.5 is not valid: it must be a number between",
        ),
        (
            {"unimportant_lr_half_life": 0.0},
            r"'unimportant_lr_half_life' = 0.0 is not valid: it must be a number > 0",
        ),
        (
            {"importance_layers": 3},
            r"'importance_layers' = 3 is not valid: it must be a string or a list, not int",
        ),
    ],
)
def test_bad_hparams_fail_at_construction(hparams, message):
    with pytest.raises(UserError, match=message):
        build("ImportanceMask", **hparams)


def test_unknown_tracked_layer_lists_the_valid_names():
    with pytest.raises(ValueError, match=r"unknown \['featurizer.conv9'\].*featurizer\.conv4"):
        build("ImportanceMask", importance_layers="featurizer.conv9")


def test_domainbed_train_script_runs_both_phases_and_saves_the_masks(tmp_path):
    hparams = {"batch_size": 8, **SHORT}
    args = ["--algorithm", "ImportanceMask", "--dataset", "Debug28", "--data_dir", str(tmp_path)]
    args += ["--hparams", json.dumps(hparams), "--steps", "5"]
    with one_loader_worker():
        domainbed_script("train", *args, "--output_dir", str(tmp_path / "out"))
    assert (tmp_path / "out" / "done").exists()
    lines = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    assert 1 < json.loads(lines[-1])["phase"] < 2, "the last window spans both phases"
    saved = torch.load(tmp_path / "out" / "model.pkl", weights_only=False)
    model = ImportanceMask(
        saved["model_input_shape"],
        saved["model_num_classes"],
        saved["model_num_domains"],
        saved["model_hparams"],
    )
    model.load_state_dict(saved["model_dict"])
    assert int(model.update_count) == 5 and model.important.any()
    assert model.importance.min() == 0 and model.importance.max() == 1


def test_scaled_schedule_keeps_the_default_proportions():
    from dmg_domainbed.algorithms.importance_mask.importance_mask import ImportanceMask

    schedule_hparams = ImportanceMask.run_length_hparams

    defaults = ImportanceMask.HPARAMS.defaults()
    assert schedule_hparams(5000) == {k: defaults[k] for k in schedule_hparams(5000)}
    assert schedule_hparams(40) == {
        "phase1_steps": 20,
        "freeze_step": 34,
        "unimportant_lr_half_life": 2,
    }


@pytest.mark.parametrize("network", ["mnist_cnn", "mlp", "resnet18"])
def test_grouped_copies_train_exactly_as_separate_copies(network, random_resnet18):
    """Phase 1 runs the copies as one network of channel groups: in float64, every copy's loss,
    gradients, weights after Adam's step and BatchNorm statistics are those of the copy trained
    alone, and the state dict keeps one entry per copy."""
    if network == "resnet18":
        model = build_resnet18("ImportanceMask", freeze_bn=False)
        batches = minibatches(input_shape=(3, 32, 32), num_classes=7)  # it pools adaptively
    else:
        shape = (10,) if network == "mlp" else (3, 28, 28)
        model = build("ImportanceMask", input_shape=shape, mlp_dropout=0.0)
        batches = minibatches(input_shape=shape)
    assert isinstance(model.domain_networks, grouped.GroupedCopies)
    model.double().train()
    batches = [(x.double(), y) for x, y in batches]
    copies = [net.train() for net in model.domain_networks]
    keys = {f"domain_networks.{d}.{k}" for d, net in enumerate(copies) for k in net.state_dict()}
    assert keys == {k for k in model.state_dict() if k.startswith("domain_networks.")}
    optimizers = [
        torch.optim.Adam(net.parameters(), lr=model.hparams["lr"], weight_decay=1e-4)
        for net in copies
    ]
    model.phase1_optimizer.param_groups[0]["weight_decay"] = 1e-4

    logged = model.update(batches)
    losses = []
    for net, optimizer, (x, y) in zip(copies, optimizers, batches, strict=True):
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())

    assert logged["loss"] == pytest.approx(sum(losses) / 3, rel=1e-12)
    grads = {name: p.grad for name, p in model.domain_networks.grouped.named_parameters()}
    for d, (net, trained) in enumerate(zip(copies, model.domain_networks, strict=True)):
        for name, param in net.named_parameters():
            assert torch.allclose(grads[name].chunk(3)[d], param.grad, rtol=1e-9, atol=1e-12)
        expected, state = net.state_dict(), trained.state_dict()
        for key, value in expected.items():
            assert torch.allclose(state[key].double(), value.double(), rtol=1e-9, atol=1e-12), key


def test_grouped_copies_take_minibatches_of_unequal_sizes_one_copy_at_a_time():
    model = build("ImportanceMask").double()
    batches = [(x.double(), y) for x, y in minibatches()]
    batches[1] = (batches[1][0][:2], batches[1][1][:2])
    copies = [net.train() for net in model.domain_networks]
    expected = [F.cross_entropy(net(x), y).item() for net, (x, y) in zip(copies, batches)]
    assert model.update(batches)["loss"] == pytest.approx(sum(expected) / 3, rel=1e-12)
    moved = [
        not torch.equal(before.classifier.weight, after.classifier.weight)
        for before, after in zip(copies, model.domain_networks, strict=True)
    ]
    assert moved == [True, True, True]
