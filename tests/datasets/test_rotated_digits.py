"""RotatedDigits as DomainBed sees it: registered, deterministic, disjoint domains, MLP-shaped."""

import numpy as np
import pytest
import torch
from domainbed import datasets, hparams_registry, networks
from sklearn.datasets import load_digits
from torch.utils.data import default_collate

from dmg_domainbed.errors import UserError


def build(test_envs=(0,), hparams=None):
    return datasets.get_dataset_class("RotatedDigits")(None, list(test_envs), hparams or {})


@pytest.fixture(scope="module")
def dataset():
    return build()


def sklearn_index(images: torch.Tensor) -> list[int]:
    """Position in scikit-learn's digits of each 8x8 image (every digit image is unique)."""
    digits = load_digits()
    positions = {
        (image / 16.0).astype(np.float32).tobytes(): i for i, image in enumerate(digits.images)
    }
    return [positions[image.numpy().tobytes()] for image in images.view(-1, 8, 8)]


def test_registered_in_domainbed_with_four_rotation_domains():
    assert "RotatedDigits" in datasets.DATASETS
    assert datasets.num_environments("RotatedDigits") == 4
    assert datasets.get_dataset_class("RotatedDigits").ENVIRONMENTS == ["0", "30", "60", "90"]


def test_shaped_for_domainbed_mlp(dataset):
    assert dataset.input_shape == (64,)
    assert dataset.num_classes == 10
    assert len(dataset) == 4
    assert sum(len(env) for env in dataset) == 1797
    for env in dataset:
        x, y = env[0]
        assert x.shape == (64,) and x.dtype == torch.float32
        # a plain int label, as DomainBed's image folders give; batches collate to int64
        assert isinstance(y, int)
        assert default_collate([env[0], env[1]])[1].dtype == torch.long
        inputs, labels = env.tensors
        assert 0.0 <= inputs.min() and inputs.max() <= 1.0
        assert set(labels.tolist()) == set(range(10))
    hparams = hparams_registry.default_hparams("ERM", "RotatedDigits")
    assert isinstance(networks.Featurizer(dataset.input_shape, hparams), networks.MLP)


def test_same_data_whatever_the_test_envs_and_hparams(dataset):
    other = build(test_envs=(2, 3), hparams={"batch_size": 7, "lr": 0.5})
    for env, other_env in zip(dataset, other, strict=True):
        for mine, theirs in zip(env.tensors, other_env.tensors, strict=True):
            assert torch.equal(mine, theirs)


def test_domains_are_disjoint_rotations_of_real_digits(dataset):
    digits = load_digits()
    upright = dataset[0].tensors[0]
    # A quarter turn maps the 8x8 grid onto itself, so the 90-degree domain turns back exactly.
    turned_back = torch.rot90(dataset[3].tensors[0].view(-1, 8, 8), k=-1, dims=(1, 2))
    first, last = sklearn_index(upright), sklearn_index(turned_back)
    assert not set(first) & set(last)
    assert dataset[0].tensors[1].tolist() == digits.target[first].tolist()
    assert dataset[3].tensors[1].tolist() == digits.target[last].tolist()
    assert not torch.allclose(dataset[1].tensors[0][:5], upright[:5])


def test_dataset_hparams_reach_domainbed():
    defaults = hparams_registry.default_hparams("DMG", "RotatedDigits")
    assert defaults["mlp_width"] == 128 and defaults["mlp_depth"] == 3
    assert defaults["lr"] == 1e-3 and defaults["batch_size"] == 32
    drawn = hparams_registry.random_hparams("DMG", "RotatedDigits", 5)
    assert drawn == hparams_registry.random_hparams("DMG", "RotatedDigits", 5)
    assert drawn["mlp_width"] != defaults["mlp_width"] or drawn["lr"] != defaults["lr"]


@pytest.mark.parametrize(
    "test_envs, problem",
    [
        ([4], "test environment 4"),
        ([-1], "test environment -1"),
        ([0, 0], "names a domain twice"),
        ([0, 1, 2, 3], "leaves no domain to train on"),
    ],
)
def test_it_checks_its_test_envs_when_built(test_envs, problem):
    with pytest.raises(UserError, match=problem) as refused:
        build(test_envs)
    assert "RotatedDigits has 4 domains (0: '0', 1: '30', 2: '60', 3: '90')" in str(refused.value)
