"""DMG's overlap penalty does what Eq. 3 asks of it: with a large ``lambda_overlap`` the soft IoU
between the source domains' masks falls during training; without the penalty the classification
loss alone does not push the masks apart (the overlap rises or stays).

Trained in this process on the embedded RotatedDigits, built by DomainBed's dataset registry,
with DMG as DomainBed builds it (its registry's default hparams for that dataset) and the demo's
``mask_lr`` (in 40 steps the default 1e-3 barely moves the masks).
"""

import pytest
import torch

from dmg_domainbed.demo import DEMO_HPARAMS

STEPS = 40
BATCH = 32
TEST_ENV = 0


@pytest.fixture(scope="module")
def rotated_digits():
    from domainbed import datasets, hparams_registry

    hparams = hparams_registry.default_hparams("DMG", "RotatedDigits")
    return datasets.get_dataset_class("RotatedDigits")(None, [TEST_ENV], hparams), hparams


def overlap_during_training(rotated_digits, lambda_overlap: float) -> list[float]:
    """The logged overlap term (Eq. 2 summed over masked layers) at each of ``STEPS`` updates."""
    from domainbed import algorithms

    dataset, hparams = rotated_digits
    torch.manual_seed(0)
    sources = [env for i, env in enumerate(dataset) if i != TEST_ENV]
    dmg = algorithms.get_algorithm_class("DMG")(
        dataset.input_shape,
        dataset.num_classes,
        len(sources),
        {**hparams, **DEMO_HPARAMS["DMG"], "lambda_overlap": lambda_overlap},
    )
    sampler = torch.Generator().manual_seed(0)
    overlaps = []
    for _ in range(STEPS):
        minibatches = []
        for env in sources:
            inputs, labels = env.tensors
            index = torch.randint(len(labels), (BATCH,), generator=sampler)
            minibatches.append((inputs[index], labels[index]))
        overlaps.append(dmg.update(minibatches)["overlap"])
    return overlaps


def test_a_large_overlap_weight_pulls_the_domains_masks_apart(rotated_digits):
    overlaps = overlap_during_training(rotated_digits, lambda_overlap=10.0)
    assert overlaps[-1] < 0.9 * overlaps[0], overlaps
    # falling throughout, not by chance at the last step
    assert all(later < earlier for earlier, later in zip(overlaps[::10], overlaps[10::10]))


def test_without_the_penalty_the_overlap_does_not_fall(rotated_digits):
    overlaps = overlap_during_training(rotated_digits, lambda_overlap=0.0)
    assert overlaps[-1] >= overlaps[0] - 1e-3, overlaps
    penalised = overlap_during_training(rotated_digits, lambda_overlap=10.0)
    assert penalised[-1] < overlaps[-1]
