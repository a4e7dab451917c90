"""bf16 mixed precision for DomainBed runs, chosen by the hparam ``precision``: ``"fp32"`` (the
default) or ``"bf16"``, declared in :mod:`dmg_domainbed.hparams.every_algorithm` outside
DomainBed's registry, so runs that do not ask keep exactly their hparams, results and
checkpoints (random search never draws bf16; a record without it is fp32).

With ``"bf16"``, every algorithm DomainBed builds (:mod:`dmg_domainbed.integration`) runs
``update``, ``predict`` and ``predict_known_domain`` under ``torch.autocast(device_type,
dtype=torch.bfloat16)``: weights, gradients and optimiser state stay fp32, and bf16 has fp32's
exponent range, so no loss scaling is needed. Predictions are returned as fp32. 4-D weights
go ``channels_last`` (NHWC kernels for bf16 convolutions) and image inputs are handed over in bf16
and ``channels_last`` in one copy (a network's first layer under autocast computes on bf16 images
anyway; an algorithm that computes on the images before its network, as DomainBed's Mixup mixes
two batches, does so in bf16: within a bf16 rounding, about half a level of an 8-bit image after
DomainBed's normalisation); global average pools take their mean in the layout they are given (an
``AdaptiveAvgPool2d`` to 1x1 re-strides its output to ``channels_last``, and the flatten after it
then costs two launches more in every backward). So a bf16 step launches fp32's kernels and
autocast's casts, nothing else (``benchmarks/step_counts.py``). Where precision matters, code runs
in :func:`full_precision` islands (docs/performance.md).
"""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from dmg_domainbed.errors import UserError
from dmg_domainbed.hparams.every_algorithm import BF16, FP32, PRECISIONS
from dmg_domainbed.hparams.every_algorithm import EVERY_ALGORITHM as HPARAMS
from dmg_domainbed.hparams.every_algorithm import PRECISION as HPARAM

CHOICES = PRECISIONS
#: The methods a bf16 run executes under autocast, where an algorithm has them.
AUTOCAST_METHODS = ("update", "predict", "predict_known_domain")
#: Methods whose tensor result is a prediction, returned as fp32.
PREDICTIONS = ("predict", "predict_known_domain")


@contextlib.contextmanager
def full_precision() -> Iterator[None]:
    """Autocast off on every device: operations inside run in their inputs' dtype.

    An fp32 island inside a bf16 step; callers give it fp32 tensors (``tensor.float()``).
    Outside autocast it changes nothing.
    """
    with torch.autocast("cpu", enabled=False), torch.autocast("cuda", enabled=False):
        yield


#: Algorithms that cannot run in bf16, and why.
FP32_ONLY = {
    "RSC": "DomainBed's RSC reads its features' gradient into NumPy, which has no bf16 "
    "(a TypeError at the first step)",
}


def check(hparams: Mapping[str, Any], algorithm: type) -> str:
    """The precision ``hparams`` ask for; :class:`UserError` for a value :data:`HPARAMS`
    refuses, or bf16 for an algorithm of :data:`FP32_ONLY` or a subclass of one."""
    declared, owner = HPARAMS[HPARAM], algorithm.__name__
    value = hparams.get(HPARAM, declared.default)
    declared.check(value, owner)
    fp32_only = [c.__name__ for c in algorithm.__mro__ if c.__name__ in FP32_ONLY]
    if value == BF16 and fp32_only:
        raise UserError(
            f"{owner} hparam '{HPARAM}' = '{BF16}' cannot run: {FP32_ONLY[fp32_only[0]]}. "
            f"Run {owner} with '{FP32}' (remove '{HPARAM}' from its hparams)."
        )
    return value


def apply(algorithm: nn.Module, hparams: Mapping[str, Any]) -> None:
    """Make ``algorithm`` run in the precision ``hparams`` ask for (fp32: nothing): the
    methods are replaced on the instance; the layout is set at the first call, once the
    networks exist and sit on their device."""
    value = check(hparams, type(algorithm))  # the preflight checks it the same way
    if value == FP32:
        return
    for name in AUTOCAST_METHODS:
        own = vars(algorithm).get(name)  # init_seed's, set on the instance before this
        method = own.__func__ if own is not None else getattr(type(algorithm), name, None)
        if method is not None:
            # A bound method, so that copy.deepcopy(algorithm) binds the copy's to the copy.
            vars(algorithm)[name] = types.MethodType(
                in_bf16(method, name in PREDICTIONS), algorithm
            )


def in_bf16(method: Callable, prediction: bool) -> Callable:
    """``method`` run under bf16 autocast on the algorithm's device, image inputs in bf16 and
    ``channels_last``; a ``prediction``'s floating-point tensor returned as fp32."""

    @functools.wraps(method)
    def run(algorithm: nn.Module, *args: Any, **kwargs: Any) -> Any:
        device = prepare(algorithm, args)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            result = method(algorithm, *(bf16_images(arg) for arg in args), **kwargs)
        if prediction and isinstance(result, torch.Tensor) and result.is_floating_point():
            return result.float()
        return result

    return run


def prepare(algorithm: nn.Module, args: tuple) -> torch.device:
    """The algorithm's device, checked for bf16; once 4-D inputs are seen, its 4-D weights in
    ``channels_last`` and its global average pools taking a plain mean."""
    parameter = next(algorithm.parameters(), None)
    device = parameter.device if parameter is not None else torch.device("cpu")
    # Native bf16 arithmetic needs compute capability 8.0 (Ampere); older GPUs only emulate it.
    if device.type == "cuda" and torch.cuda.get_device_capability(device) < (8, 0):
        raise UserError(
            f"hparam '{HPARAM}' is '{BF16}' but {torch.cuda.get_device_name(device)} has no "
            "native bf16 arithmetic (compute capability below 8.0); run on an Ampere or newer "
            f"GPU, or with '{FP32}'."
        )
    if not getattr(algorithm, "_channels_last", False) and any(map(has_images, args)):
        algorithm.to(memory_format=torch.channels_last)
        for module in algorithm.modules():
            if isinstance(module, nn.AdaptiveAvgPool2d) and module.output_size in (1, (1, 1)):
                vars(module)["forward"] = spatial_mean  # the same numbers, not re-strided
        vars(algorithm)["_channels_last"] = True
    return device


def has_images(arg: Any) -> bool:
    """Whether ``arg`` (a tensor, or DomainBed's list of ``(x, y)`` minibatches) holds 4-D
    floating-point inputs."""
    if isinstance(arg, torch.Tensor):
        return arg.dim() == 4 and arg.is_floating_point()
    if isinstance(arg, list | tuple):
        return any(map(has_images, arg))
    return False


def bf16_images(arg: Any) -> Any:
    """``arg`` with every 4-D floating-point tensor in bf16 and ``channels_last`` layout."""
    if isinstance(arg, torch.Tensor):
        if has_images(arg):
            return arg.to(torch.bfloat16, memory_format=torch.channels_last)
        return arg
    if isinstance(arg, list | tuple):
        return type(arg)(bf16_images(item) for item in arg)
    return arg


def spatial_mean(x: torch.Tensor) -> torch.Tensor:
    """What ``AdaptiveAvgPool2d(1)`` computes (its own code takes this mean), in ``x``'s layout."""
    return x.mean((-2, -1), keepdim=True)
