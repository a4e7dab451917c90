"""DMG as DomainBed constructs and trains it (paper Sec. 2, Eq. 2-3)."""

import copy

import pytest
import torch
import torchvision
from domainbed import algorithms, hparams_registry
from torch import nn

from dmg_domainbed.algorithms.dmg.dmg import DMG
from dmg_domainbed.errors import UserError

from ..conftest import build, minibatches
from ..torch_calls import TorchCalls


def set_constant_probabilities(dmg, per_domain):
    with torch.no_grad():
        for logits in dmg.masks.logits:
            for d, p in enumerate(per_domain):
                logits[d] = torch.logit(torch.tensor(p))


def test_registered_in_domainbed():
    assert algorithms.get_algorithm_class("DMG") is DMG
    assert "DMG" in algorithms.ALGORITHMS


def test_default_masks_on_mnist_cnn_are_the_last_conv_block_and_classifier_inputs():
    dmg = build("DMG")
    assert dmg.masks.layer_names == ["featurizer.conv4", "classifier"]
    assert [tuple(p.shape) for p in dmg.masks.logits] == [(3, 128), (3, 128)]


def test_default_masks_on_an_mlp_are_its_hidden_layers_and_the_classifier_input():
    dmg = build("DMG", input_shape=(10,))
    assert dmg.masks.layer_names == [
        "featurizer.hiddens.0",
        "featurizer.hiddens.1",
        "featurizer.output",
        "classifier",
    ]


@pytest.mark.parametrize("name", ["Aggregate", "MultiHead", "DMG"])
def test_the_paper_algorithms_train_with_dropout_off_and_the_hparam_says_so(name):
    for dataset, key in (("RotatedDigits", "mlp_dropout"), ("PACS", "resnet_dropout")):
        for seed in range(5):
            assert hparams_registry.random_hparams(name, dataset, seed)[key] == 0.0
        assert hparams_registry.default_hparams(name, dataset)[key] == 0.0
    assert "mlp_dropout" not in hparams_registry.default_hparams(name, "PACS")
    erm = {
        hparams_registry.random_hparams("ERM", "RotatedDigits", s)["mlp_dropout"] for s in range(8)
    }
    assert erm != {0.0}, "ERM keeps the dataset's search"
    rates = {
        m.p
        for m in build(name, input_shape=(10,), mlp_dropout=0.3).modules()
        if isinstance(m, nn.Dropout)
    }
    assert rates == {0.3}, "a value given with --hparams is the value used"


def test_default_masks_on_resnet18_are_layer3_layer4_and_classifier_channels(monkeypatch):
    # Random weights instead of DomainBed's ImageNet download; the architecture is the same.
    random_resnet18 = torchvision.models.resnet18
    monkeypatch.setattr(torchvision.models, "resnet18", lambda pretrained: random_resnet18())
    dmg = build(
        "DMG", input_shape=(3, 224, 224), dataset="PACS", resnet18=True, resnet50_augmix=False
    )
    assert dmg.masks.layer_names == [
        "featurizer.network.layer3",
        "featurizer.network.layer4",
        "classifier",
    ]
    # the paper's ResNet-18 mask sizes: 128, 256, 512 channels
    assert [p.shape[1] for p in dmg.masks.logits] == [128, 256, 512]


def test_update_reports_the_paper_loss_terms_for_known_masks():
    dmg = build("DMG", lambda_overlap=0.1, lambda_sparsity=0.01)
    set_constant_probabilities(dmg, [0.5, 0.75, 0.25])
    out = dmg.update(minibatches())
    iou = lambda a, b: a * b / (a + b - a * b)  # noqa: E731 (constant masks: k cancels)
    per_layer = (iou(0.5, 0.75) + iou(0.5, 0.25) + iou(0.75, 0.25)) / 3
    assert out["overlap"] == pytest.approx(2 * per_layer, rel=1e-5)
    assert out["sparsity"] == pytest.approx(2 * 128 * 1.5, rel=1e-5)
    assert out["loss"] == pytest.approx(
        out["ce"] + 0.1 * out["overlap"] + 0.01 * out["sparsity"], rel=1e-5
    )
    # hard masks: only domain 1 (p = 0.75 > 0.5) is active; the two empty masks coincide
    assert out["mask_active/d0"] == 0 and out["mask_active/d1"] == 1
    assert out["mask_active/d2"] == 0
    assert out["mask_iou/classifier"] == pytest.approx(1 / 3, abs=1e-5)
    assert out["mask_iou/featurizer.conv4"] == pytest.approx(1 / 3, abs=1e-5)


def test_masks_and_network_have_separate_optimisers():
    # Adam's first step moves a weight by about its lr (here: a few float32 steps of a weight)
    dmg = build("DMG", lr=1e-8, mask_lr=0.05)
    network_before = [p.detach().clone() for p in dmg.network.parameters()]
    masks_before = [p.detach().clone() for p in dmg.masks.parameters()]
    dmg.update(minibatches())
    network = [(a - b).abs().max().item() for a, b in zip(network_before, dmg.network.parameters())]
    assert max(network) < 1e-6, network
    moved = [(a - b).abs().max().item() for a, b in zip(masks_before, dmg.masks.parameters())]
    assert all(0 < m <= 0.05 + 1e-6 for m in moved), moved
    assert dmg.mask_optimizer.param_groups[0]["lr"] == 0.05


def test_masks_learn_to_be_domain_specific_under_the_overlap_penalty():
    dmg = build("DMG", input_shape=(8,), lambda_overlap=1.0, mask_lr=0.05)
    iou = [dmg.update(minibatches(input_shape=(8,)))["overlap"] for _ in range(60)]
    assert iou[-1] < iou[0] - 0.1


def test_one_source_domain_trains_with_zero_overlap():
    dmg = build("DMG", num_domains=1)
    out = dmg.update(minibatches(num_domains=1))
    assert out["overlap"] == 0.0
    assert not any(key.startswith("mask_iou/") for key in out)
    assert dmg.predict(torch.randn(2, 3, 28, 28)).shape == (2, 4)


def test_predict_is_deterministic_and_known_domain_differs_per_domain():
    dmg = build("DMG")
    set_constant_probabilities(dmg, [0.9, 0.5, 0.1])
    dmg.eval()
    x = torch.randn(5, 3, 28, 28)
    assert torch.equal(dmg.predict(x), dmg.predict(x))
    per_domain = [dmg.predict_known_domain(x, d, "soft") for d in range(3)]
    assert not torch.allclose(per_domain[0], per_domain[2])
    mixed = dmg.predict_known_domain(x, torch.tensor([0, 1, 2, 0, 1]), "soft")
    assert torch.allclose(mixed[2], per_domain[2][2], atol=1e-5)


def test_known_domain_prediction_rejects_bad_mode_and_domain():
    dmg = build("DMG")
    x = torch.randn(2, 3, 28, 28)
    with pytest.raises(ValueError, match="mode must be one of"):
        dmg.predict_known_domain(x, 0, "greedy")
    with pytest.raises(ValueError, match=r"must lie in 0..2.*got \[3\]"):
        dmg.predict_known_domain(x, 3)


def test_a_deep_copy_is_masked_by_its_own_masks_and_leaves_the_original_alone():
    # the SWAD / moving-average pattern: copy.deepcopy of the trained algorithm
    dmg = build("DMG").eval()
    twin = copy.deepcopy(dmg)
    x = torch.randn(3, 3, 28, 28)
    before = dmg.predict(x)
    assert torch.equal(twin.predict(x), before)
    set_constant_probabilities(twin, [0.99, 0.98, 0.97])
    changed = twin.predict(x)
    assert not torch.allclose(changed, before)
    assert torch.equal(dmg.predict(x), before)
    set_constant_probabilities(dmg, [0.01, 0.02, 0.03])
    assert not torch.allclose(dmg.predict(x), before)
    assert torch.equal(twin.predict(x), changed)


@pytest.mark.parametrize("input_shape", [(3, 28, 28), (10,)])
def test_layer_shapes_are_probed_on_the_meta_device_and_give_the_masks_of_a_real_pass(
    input_shape,
):
    with TorchCalls() as calls:
        dmg = build("DMG", input_shape=input_shape)
    layer_calls = [args for name, args in calls.calls if name in ("conv2d", "linear")]
    assert layer_calls and all(a.device.type == "meta" for args in layer_calls for a in args)
    assert all(p.device.type == "cpu" for p in dmg.parameters())
    network = build("Aggregate", input_shape=input_shape).network
    widths = []
    for name in dmg.masks.layer_names:
        layer = network.get_submodule(name)
        layer.register_forward_pre_hook(lambda m, args: widths.append(args[0].shape[1]))
    network.eval()(torch.zeros(2, *input_shape))
    assert [tuple(p.shape) for p in dmg.masks.logits] == [(3, w) for w in widths]


def test_state_dict_round_trip_gives_identical_predictions():
    dmg = build("DMG")
    dmg.update(minibatches())
    clone = build("DMG")
    clone.load_state_dict(dmg.state_dict())
    dmg.eval(), clone.eval()
    x = torch.randn(3, 3, 28, 28)
    assert torch.equal(dmg.predict(x), clone.predict(x))


@pytest.mark.parametrize(
    "hparams, message",
    [
        ({"lambda_overlap": -0.1}, r"'lambda_overlap' = -0.1 is not valid: it must be a number"),
        (
            {"lambda_sparsity": "0.1"},
            r"'lambda_sparsity' = '0.1' is not valid: it must be a number .*, not str",
        ),
        (
            {"mask_init": "normal"},
            r"'mask_init' = 'normal' is not valid: it must be one of 'random_uniform', 'scalar'",
        ),
        ({"mask_lr": None}, r"'mask_lr' = None is not valid: it must be a number"),
        ({"mask_layers": 3}, r"'mask_layers' = 3 is not valid: it must be a string or a list"),
    ],
)
def test_bad_hparams_fail_at_construction(hparams, message):
    with pytest.raises(UserError, match=message):
        build("DMG", **hparams)


def test_unknown_mask_layer_lists_the_valid_names():
    with pytest.raises(ValueError, match=r"unknown \['featurizer.conv9'\].*featurizer\.conv4"):
        build("DMG", mask_layers=["featurizer.conv9", "classifier"])


def test_scalar_init_and_a_single_named_layer():
    dmg = build("DMG", mask_init="scalar", mask_init_scalar=2.0, mask_layers="classifier")
    assert dmg.masks.layer_names == ["classifier"] and dmg.masks.fold
    assert torch.equal(dmg.masks.logits[0], torch.full((3, 128), 2.0))
