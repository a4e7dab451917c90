"""Datasets: the embedded ones that need no download, manifest datasets, facts about DomainBed's
datasets, their files listed the way DomainBed reads them, and, in :mod:`.check`, the check of
those files (``dmg-domainbed data check``).
"""

from __future__ import annotations


def input_shape(dataset: str) -> tuple[int, ...] | None:
    """The input shape DomainBed's featurizer sees for ``dataset``, known without building it
    (``None`` when the class does not tell)."""
    from domainbed import datasets

    cls = datasets.get_dataset_class(dataset)
    shape = getattr(cls, "INPUT_SHAPE", None) or getattr(cls, "input_shape", None)
    if shape is None and issubclass(cls, datasets.MultipleEnvironmentImageFolder):
        shape = (3, 224, 224)
    if shape is None and issubclass(cls, datasets.MultipleEnvironmentMNIST):
        shape = (1, 28, 28)
    return tuple(shape) if shape is not None else None


#: DomainBed's ``networks.Featurizer`` by input size, and ERM's training step on one CPU core
#: (process CPU time) at each size's default batch of 3 source domains: docs/datasets.md's
#: table, from ``python benchmarks/step_time.py --quick --clock cpu --configs CONFIG``.
FEATURIZERS = {
    "vector": ("MLP", "about 1 ms a step of 3x32"),
    (28, 28): ("MNIST_CNN", "about 0.8 s a step of 3x64"),
    (32, 32): ("Wide ResNet-16-2", "about 0.8 s a step of 3x32"),
    (224, 224): (
        "ResNet-50 (ResNet-18 with the hparam resnet18)",
        "ResNet-18 about 1.2 s a step of only 3x4, ResNet-50 more: use a GPU",
    ),
}


def featurizer_of(shape: tuple[int, ...] | None) -> str:
    """The network DomainBed's ``networks.Featurizer`` builds for inputs of ``shape``, and what
    a training step of it costs on a CPU core (:data:`FEATURIZERS`)."""
    if shape is None:
        return "inputs not known before the data is loaded"
    key = "vector" if len(shape) == 1 else tuple(shape[1:3])
    size = "x".join(str(n) for n in shape)
    if key not in FEATURIZERS:
        return f"{size} inputs: no featurizer (DomainBed's networks.Featurizer refuses them)"
    network, cost = FEATURIZERS[key]
    return (
        f"{size} inputs: DomainBed's {network}, {cost} on one CPU core "
        "(docs/datasets.md#input-size-and-step-cost)"
    )
