"""The paper's protocol for Aggregate, MultiHead and DMG: the authors' learning-rate schedules,
AlexNet backbone, classifier initialisation and mask weight decay, each checked against the
rule of the authors' released code (prithv1/DMG) computed here on its own."""

import numpy as np
import pytest
import torch
import torchvision
from domainbed import hparams_registry
from domainbed.lib import misc
from torch import nn

from dmg_domainbed.algorithms.dmg.dmg import DMG
from dmg_domainbed.algorithms.paper_baselines.alexnet import AlexNetFeaturizer
from dmg_domainbed.errors import UserError

from ..conftest import build, minibatches

PAPER_ALGORITHMS = ["Aggregate", "MultiHead", "DMG"]
FEATURES = (10,)


def lrs(algorithm):
    """The learning rates the next update steps with: network, then masks (DMG)."""
    rates = [algorithm.optimizer.param_groups[0]["lr"]]
    if hasattr(algorithm, "mask_optimizer"):
        rates.append(algorithm.mask_optimizer.param_groups[0]["lr"])
    return rates


@pytest.mark.parametrize("name", PAPER_ALGORITHMS)
def test_exponential_schedule_is_the_authors_per_epoch_decay_of_the_network_lr(name):
    # 3 domains x 4 examples per update; an epoch of 20 examples: epochs end inside updates
    model = build(
        name,
        input_shape=FEATURES,
        lr=1e-3,
        batch_size=4,
        lr_schedule="exponential",
        epoch_examples=20,
    )
    reference = torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=1e-3)
    authors = torch.optim.lr_scheduler.ExponentialLR(reference, gamma=0.99)
    seen = 0
    for _ in range(12):
        stepped_with = lrs(model)
        logged = model.update(minibatches(input_shape=FEATURES))
        expected = reference.param_groups[0]["lr"]
        assert stepped_with[0] == pytest.approx(expected, rel=1e-12)
        assert logged["lr"] == pytest.approx(expected, rel=1e-12)
        if name == "DMG":
            assert stepped_with[1] == logged["mask_lr"] == model.hparams["mask_lr"]
        seen += 12
        while seen >= 20 * (authors.last_epoch + 1):  # the authors step once per epoch
            reference.step()  # no gradients: keeps the scheduler's call order, moves nothing
            authors.step()
    assert expected == pytest.approx(1e-3 * 0.99**6)  # 132 examples before the last: epoch 6


@pytest.mark.parametrize("name", PAPER_ALGORITHMS)
def test_inverse_schedule_is_the_authors_invlr_on_every_optimiser(name):
    masks = {"mask_lr": 0.05} if name == "DMG" else {}  # the others refuse a mask_lr
    model = build(name, input_shape=FEATURES, lr=1e-3, lr_schedule="inverse", **masks)
    base = lrs(model)
    expected = list(base)
    for t in range(6):
        if t > 0:  # InvLR's recursive form: lr_t = lr_{t-1} ((1 + g t) / (1 + g (t - 1)))^-p
            ratio = ((1 + 1e-4 * t) / (1 + 1e-4 * (t - 1))) ** -0.75
            expected = [lr * ratio for lr in expected]
        stepped_with = lrs(model)
        logged = model.update(minibatches(input_shape=FEATURES))
        assert stepped_with == pytest.approx(expected, rel=1e-9)
        assert [logged[key] for key in ("lr", "mask_lr") if key in logged] == stepped_with
    assert expected[0] < base[0]


def test_constant_schedule_logs_nothing_new_and_keeps_domainbeds_lr():
    model = build("DMG", input_shape=FEATURES, lr=1e-3)
    logged = [model.update(minibatches(input_shape=FEATURES)) for _ in range(3)][-1]
    assert "lr" not in logged and "mask_lr" not in logged
    assert lrs(model) == [1e-3, model.hparams["mask_lr"]]


def test_exponential_schedule_needs_the_epoch_length():
    with pytest.raises(UserError, match=r"'epoch_examples' is not set.*\"epoch_examples\": 5995"):
        build("Aggregate", input_shape=FEATURES, lr_schedule="exponential")
    with pytest.raises(
        UserError, match=r"'lr_schedule' = 'cosine' is not valid: it must be one of 'constant'"
    ):
        build("DMG", input_shape=FEATURES, lr_schedule="cosine")


def test_multihead_heads_start_as_the_authors_custom_init():
    model = build("MultiHead", num_classes=10)  # 3 heads of 10 x 128 weights
    assert model.head_weight.std().item() == pytest.approx(0.001, rel=0.1)
    assert model.head_weight.mean().abs().item() < 1e-4
    assert torch.equal(model.head_bias, torch.zeros_like(model.head_bias))
    pytorch = build("MultiHead", num_classes=10, classifier_init="pytorch")
    assert pytorch.head_weight.abs().max().item() > 0.05  # nn.Linear: U(-1/sqrt(128), ...)


def test_aggregate_and_dmg_keep_pytorchs_init_unless_asked_for_the_authors():
    for name in ("Aggregate", "DMG"):
        assert build(name).network.classifier.bias.abs().max().item() > 0
        normal = build(name, classifier_init="normal").network.classifier
        assert normal.weight.std().item() == pytest.approx(0.001, rel=0.2)
        assert not normal.bias.any()


def test_mask_weight_decay_defaults_to_the_authors_per_dataset_configs():
    assert hparams_registry.default_hparams("DMG", "PACS")["mask_weight_decay"] == 1e-5
    assert hparams_registry.default_hparams("DMG", "DomainNet")["mask_weight_decay"] == 0.0
    searched = {
        hparams_registry.random_hparams("DMG", "PACS", s)["mask_weight_decay"] for s in range(20)
    }
    assert searched == {0.0, 1e-5}
    dmg = build("DMG", dataset="PACS", input_shape=FEATURES, mask_weight_decay=1e-5)
    assert dmg.mask_optimizer.param_groups[0]["weight_decay"] == 1e-5


def test_mask_lr_search_reaches_the_authors_1e4():
    sample = DMG.HPARAMS["mask_lr"].sample
    drawn = [sample(np.random.RandomState(seed)) for seed in range(500)]
    assert 1e-4 <= min(drawn) < 1.2e-4 and 0.08 < max(drawn) <= 0.1
    domainbeds = np.random.RandomState(misc.seed_hash(3, "mask_lr"))  # how DomainBed seeds it
    assert hparams_registry.random_hparams("DMG", "PACS", 3)["mask_lr"] == sample(domainbeds)
    assert hparams_registry.default_hparams("DMG", "PACS")["mask_lr"] == 1e-3


@pytest.fixture
def random_alexnet(monkeypatch):
    """torchvision's AlexNet with random weights; records the weights asked for."""
    asked = []
    alexnet = torchvision.models.alexnet

    def build_alexnet(weights=None):
        asked.append(weights)
        return alexnet()

    monkeypatch.setattr(torchvision.models, "alexnet", build_alexnet)
    return asked


IMAGES = {"input_shape": (3, 224, 224), "num_classes": 7, "dataset": "PACS", "alexnet": True}


@pytest.mark.parametrize("name", PAPER_ALGORITHMS)
def test_alexnet_featurizer_is_torchvisions_imagenet_alexnet_without_its_last_layer(
    name, random_alexnet
):
    model = build(name, **IMAGES, alexnet_dropout=0.5)
    features = model.featurizer if name == "MultiHead" else model.network.featurizer
    assert isinstance(features, AlexNetFeaturizer) and random_alexnet == ["IMAGENET1K_V1"]
    assert [type(m).__name__ for m in features.classifier] == [
        "Dropout",
        "Linear",
        "ReLU",
        "Dropout",
        "Linear",
        "ReLU",
    ]
    assert [m.p for m in features.classifier if isinstance(m, nn.Dropout)] == [0.5, 0.5]
    model.eval()
    assert model.predict(torch.randn(2, 3, 224, 224)).shape == (2, 7)


def test_dmg_masks_alexnets_layers_as_the_authors(random_alexnet):
    dmg = build("DMG", **IMAGES)
    assert dmg.masks.layer_names == [
        "featurizer.classifier.1",
        "featurizer.classifier.4",
        "classifier",
    ]
    assert [p.shape[1] for p in dmg.masks.logits] == [9216, 4096, 4096]
    assert all(m.p == 0 for m in dmg.modules() if isinstance(m, nn.Dropout))


def test_alexnet_needs_224x224_images():
    with pytest.raises(UserError, match=r"'alexnet' is true but the dataset's inputs are \(64,\)"):
        build("Aggregate", input_shape=(64,), alexnet=True)
