"""RotatedDigits: scikit-learn's bundled 8x8 digits (``load_digits``: 1,797 images, 10 classes),
one rotation angle per domain, in the style of DomainBed's RotatedMNIST without a download;
flattened to 64 features, DomainBed's MLP featurizer, so the demo runs on a laptop CPU.
"""

from __future__ import annotations

import numpy as np
import torch
from domainbed.datasets import MultipleDomainDataset
from torch.utils.data import Dataset
from torchvision.transforms.functional import InterpolationMode, rotate

from dmg_domainbed.datasets.when_built import check_and_record
from dmg_domainbed.hparams import HParam, HParamSpace


class DomainExamples(Dataset):
    """One domain's examples, ``tensors = (inputs, labels)``, stored as ready-made pairs (one
    lookup per example instead of a ``TensorDataset``'s two indexings; the same batches)."""

    def __init__(self, inputs: torch.Tensor, labels: torch.Tensor):
        self.tensors = (inputs, labels)
        self._pairs = list(zip(inputs.unbind(0), labels.tolist(), strict=True))

    def __len__(self) -> int:
        return len(self._pairs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self._pairs[index]


# The split of images into domains is fixed once and for all: it never depends on the
# hparams, the test environments or any training seed, so every run sees the same domains.
PERMUTATION_SEED = 0


class RotatedDigits(MultipleDomainDataset):
    """Four domains: disjoint quarters of the digits, rotated by 0, 30, 60 and 90 degrees.

    Domain ``i`` holds the images at positions ``i, i + 4, i + 8, ...`` of a fixed permutation
    of the 1,797 digits (449 or 450 images each). Pixels are scaled to [0, 1], rotated
    counter-clockwise with bilinear interpolation (zero fill, so corners of the 8x8 frame are
    cut as in RotatedMNIST) and flattened to shape ``(64,)``. ``root`` is not used.
    """

    ENVIRONMENTS = ["0", "30", "60", "90"]
    N_IMAGES = 1_797  # every domain's, as a sweep's cost counts what train.py evaluates
    INPUT_SHAPE = (64,)
    # 600 steps (about 50 epochs of each domain): the algorithms' source validation accuracy
    # levels off by step 500, and DMG's masks drift apart at the demo's mask_lr (hard
    # IoU between domains falls from 1 to 0.55-0.89).
    N_STEPS = 600
    CHECKPOINT_FREQ = 100
    N_WORKERS = 0  # the whole dataset is one small tensor; worker processes only cost time

    HPARAMS = HParamSpace(
        HParam(
            "mlp_width",
            128,
            lambda r: int(2 ** r.uniform(5, 8)),
            minimum=1,
            help="width of DomainBed's MLP featurizer",
        ),
        HParam(
            "mlp_depth",
            3,
            lambda r: int(r.choice([3, 4])),
            minimum=2,
            help="number of linear layers of DomainBed's MLP featurizer",
        ),
        HParam(
            "mlp_dropout",
            0.0,
            lambda r: float(r.choice([0.0, 0.1])),
            minimum=0.0,
            help="dropout of DomainBed's MLP featurizer",
        ),
        HParam(
            "lr",
            1e-3,
            lambda r: 10 ** r.uniform(-3.5, -2.5),
            minimum=0.0,
            help="Adam learning rate of the network",
        ),
        HParam(
            "batch_size",
            32,
            lambda r: int(2 ** r.uniform(4, 6)),
            minimum=1,
            help="examples per source domain in each step",
        ),
    )

    def __init__(self, root, test_envs, hparams):
        super().__init__()
        check_and_record(type(self), test_envs, hparams)
        from sklearn.datasets import load_digits  # imported here: DomainBed imports us early

        digits = load_digits()
        images = torch.tensor(digits.images, dtype=torch.float32) / 16.0
        labels = torch.tensor(digits.target, dtype=torch.long)
        order = torch.from_numpy(np.random.RandomState(PERMUTATION_SEED).permutation(len(images)))
        images, labels = images[order], labels[order]

        n_envs = len(self.ENVIRONMENTS)
        self.datasets = []
        for i, angle in enumerate(self.ENVIRONMENTS):
            subset = images[i::n_envs].unsqueeze(1)
            rotated = rotate(
                subset, float(angle), interpolation=InterpolationMode.BILINEAR, fill=0.0
            )
            self.datasets.append(DomainExamples(rotated.flatten(1), labels[i::n_envs]))
        self.input_shape = self.INPUT_SHAPE
        self.num_classes = 10
