"""Reading a checkpoint file (train.py's ``model.pkl``, ``model_step<N>.pkl``) without running
code it may hold.

A ``torch.save`` file is a pickle, and unpickling calls whatever the file names: a run folder
from someone else can run code when read. The unpickler here gives ``find_class`` only what a
checkpoint of train.py holds (``OrderedDict``, torch's tensor rebuilders and dtypes, and for
hparams DomainBed samples with NumPy, NumPy's scalar and dtype with a Latin-1
``_codecs.encode``), as fresh wrappers a file cannot alter, and refuses anything else, and any
TorchScript archive, with :class:`RefusedName` before anything is called. torch's own
``weights_only=True`` refuses those NumPy scalars on torch 2.1; this list is the same on every
supported torch and NumPy (``numpy._core`` or ``numpy.core``).
"""

from __future__ import annotations

import codecs
import pickle
import zipfile
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

TORCHSCRIPT_RECORD = "constants.pkl"  # what makes torch.load call torch.jit.load


class RefusedName(pickle.UnpicklingError):
    """A name the file asks to be imported while it is read, which a checkpoint never holds."""

    def __init__(self, module: str, name: str):
        super().__init__(f"{module}.{name}")
        self.qualified = f"{module}.{name}"


def _latin1(text: str, encoding: str) -> bytes:
    """``_codecs.encode`` as pickle protocol 2 writes bytes (a NumPy scalar's): Latin-1 only."""
    if encoding not in ("latin1", "latin-1"):
        raise RefusedName("_codecs", f"encode with codec {encoding!r}")
    return codecs.encode(text, encoding)


def _fresh(function: Callable) -> Callable:
    return lambda *args, **kwargs: function(*args, **kwargs)


def _allowed() -> dict[tuple[str, str], Any]:
    """``(module, name)`` -> object, for every name a checkpoint of train.py may hold: immutable
    types and values as they are, functions as fresh wrappers."""
    import numpy as np
    import torch

    # NumPy 2, and NumPy 1.26 whose numpy._core has no attributes until a submodule is imported
    try:
        from numpy._core.multiarray import scalar as numpy_scalar
    except ImportError:  # NumPy 1.24 and 1.25
        from numpy.core.multiarray import scalar as numpy_scalar
    scalar = _fresh(numpy_scalar)
    allowed: dict[tuple[str, str], Any] = {
        ("collections", "OrderedDict"): OrderedDict,
        ("torch", "Size"): torch.Size,
        ("_codecs", "encode"): _fresh(_latin1),
        ("numpy", "dtype"): np.dtype,
        ("numpy.core.multiarray", "scalar"): scalar,
        ("numpy._core.multiarray", "scalar"): scalar,
    }
    for name in ("_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_parameter"):
        allowed["torch._utils", name] = _fresh(getattr(torch._utils, name))
    for name, value in vars(torch).items():
        if isinstance(value, torch.dtype):
            allowed["torch", name] = value
    return allowed


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        found = _allowed().get((module, name))
        if found is None:
            raise RefusedName(module, name)
        return found


class _RestrictedPickle:
    """What ``torch.load`` asks of its ``pickle_module``: ``Unpickler`` and ``load``."""

    Unpickler = _Unpickler

    @staticmethod
    def load(file, **kwargs) -> Any:
        return _Unpickler(file, **kwargs).load()


def load_checkpoint(path: Path, map_location: Any = None) -> Any:
    """What ``torch.save`` wrote to ``path``; :class:`RefusedName` (before anything the file
    names is called) where it names anything a checkpoint of train.py does not hold."""
    import torch

    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            if any(Path(name).name == TORCHSCRIPT_RECORD for name in archive.namelist()):
                raise RefusedName("torch.jit", "load (a TorchScript archive, which holds code)")
    # weights_only=False hands the unpickling to _RestrictedPickle, which refuses more than
    # torch's own weights-only unpickler would, and takes NumPy scalars on every torch.
    return torch.load(
        path, map_location=map_location, pickle_module=_RestrictedPickle, weights_only=False
    )
