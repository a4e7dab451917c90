"""Datasets: the embedded ones that need no download, manifest datasets, facts about DomainBed's
datasets, their files listed the way DomainBed reads them, and, in :mod:`.check`, the check of
those files (``dmg-domainbed data check``, the doctor's and the sweep's data question), which
sits beside the listings it compares the folders with.

The embedded datasets are shaped like DomainBed's ``MultipleDomainDataset`` and registered into
``domainbed.datasets`` through the ``domainbed.datasets`` entry-point group.
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
