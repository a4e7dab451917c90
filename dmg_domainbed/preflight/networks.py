"""Build an algorithm's network before a sweep launches, to catch hparams only the network can
check (a DMG ``mask_layers`` name that does not exist) before any job folder exists. The build
loads no weights (torchvision's and timm's builders told ``pretrained=False``), reads no data,
and puts the parameters on PyTorch's ``meta`` device (shapes, no storage).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from unittest import mock

from dmg_domainbed.errors import UserError
from dmg_domainbed.preflight.hparams import CheckedRun

TORCHVISION_BUILDERS = ("resnet18", "resnet50", "alexnet")


@contextlib.contextmanager
def without_pretrained_weights() -> Iterator[None]:
    """Within the block, torchvision's and timm's builders build networks without weights."""
    import timm
    import torchvision

    with contextlib.ExitStack() as stack:
        for name in TORCHVISION_BUILDERS:
            build = getattr(torchvision.models, name)
            random = functools.partial(lambda build, *_, **__: build(weights=None), build)
            stack.enter_context(mock.patch.object(torchvision.models, name, random))
        create = timm.create_model
        random = lambda *a, **k: create(*a, **{**k, "pretrained": False})  # noqa: E731
        stack.enter_context(mock.patch.object(timm, "create_model", random))
        yield


def check_network(run: CheckedRun) -> str | None:
    """Build ``run``'s algorithm as train.py would, without weights or data: its
    :class:`UserError` (an hparam the network refutes) is raised, any other failure returned
    as a note (the check could not be made)."""
    import torch
    from domainbed import algorithms, datasets

    algorithm, dataset = run.algorithm, run.dataset
    if run.input_shape is None:
        return f"{algorithm} on {dataset}: input shape unknown before loading the data; not built"
    num_domains = max(1, len(datasets.get_dataset_class(dataset).ENVIRONMENTS) - 1)
    cls = algorithms.get_algorithm_class(algorithm)
    try:
        with without_pretrained_weights(), torch.device("meta"):
            cls(run.input_shape, 2, num_domains, dict(run.hparams))
    except UserError:
        raise
    except Exception as error:  # the cheap build itself failed: say so, do not block the sweep
        return (
            f"{algorithm} on {dataset}: its network could not be built before launch "
            f"({type(error).__name__}: {error}); the jobs will find out"
        )
    return None
