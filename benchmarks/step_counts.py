"""What one training step asks of the host, counted on any machine: the CPU proxies of GPU goals.

A step whose kernels are small is bound by the host: it costs about ``max(GPU time, launches x
the host's time per launch)``. The host's side is the same on every device, so a CPU can count it:
every algorithm of ``step_time.py`` (and its floor: DMG's and CorGrad's unavoidable step) is built
as ``step_time.py`` builds it and one ``update`` is recorded, forward, backward and optimiser step,
under a ``TorchDispatchMode`` (every aten operation, autograd's backward and autocast's casts
included). Per step it prints:

* ``aten ops``: every aten operation;
* ``launches``: the operations that run a kernel, i.e. neither views (``view``, ``t``,
  ``detach``, ``expand``, ...) nor bare allocations (``empty``, ``empty_strided``) nor the
  profiler's marks, nor the host's work on Adam's step counts (a GPU keeps them on the host); a
  ``_foreach_*`` operation on the fast path is one launch, on the per-tensor path one per tensor
  (on a GPU the fast path takes a few launches per operation, however many tensors);
* ``syncs``: host-device synchronisations: values read back (``item``, ``tolist``, ``float()``,
  ``bool()``) and operations whose output size depends on the data (``nonzero``,
  ``masked_select``);
* ``slow foreach``: the launches of ``_foreach_*`` operations that take their per-tensor path on a
  GPU, where the tensors of one position in the lists differ in strides, dtype or device, or one
  is not dense (as gradients in another memory format than their weights make Adam's);
* ``x floor`` or ``x ERM``: launches over the floor's (DMG, CorGrad), or ERM's.

Optimisers are counted as a GPU runs them: Adam's ``foreach`` path (a CPU would loop per
parameter). The counts do not depend on the batch, nor on the image size once the last stage
keeps more than one position, as 224x224 images (7x7) do: the ResNets are counted on 64x64
images (2x2), 2 per domain; bf16 is counted under CPU autocast, as a GPU runs it.
ImportanceMask is counted in both phases (``phase 1``: the per-domain copies; ``phase 2``: one
network with per-weight learning rates).

Usage: ``python benchmarks/step_counts.py [--configs tiny resnet18 resnet50] [--algorithms ...]
[--precision fp32|bf16]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch._prims_common import (
    is_non_overlapping_and_dense_or_false as is_non_overlapping_and_dense,
)
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import step_time  # noqa: E402  (the builders this script counts, beside it)

from dmg_domainbed import precision as precisions  # noqa: E402

aten = torch.ops.aten
#: Operations that allocate without writing (no kernel).
ALLOCATIONS = {
    aten.empty.memory_format,
    aten.empty_strided.default,
    aten.empty_like.default,
    aten.new_empty.default,
    aten.new_empty_strided.default,
    aten.resize_.default,
}
#: Operations that return a view without the alias annotation of one.
UNANNOTATED_VIEWS = {
    aten._unsafe_view.default,
    aten._reshape_alias.default,
    aten.lift_fresh.default,
}
#: Operations whose output size depends on the data: the host waits for the device.
DATA_DEPENDENT = {"nonzero", "masked_select", "_local_scalar_dense", "unique_dim", "_unique2"}
#: Python calls that copy values to the host without an aten operation on a CPU tensor.
HOST_READS = ("tolist",)


@dataclass(frozen=True)
class Counts:
    """One training step's host work (see the module docstring)."""

    ops: int
    launches: int
    syncs: int
    slow_foreach: int
    casts: int = 0  # launches that change a tensor's floating-point dtype (autocast's casts)


class StepRecorder(TorchDispatchMode):
    """``with StepRecorder() as recorder: ...``; then ``recorder.counts()``."""

    def __init__(self, host_tensors: Sequence[torch.Tensor] = ()) -> None:
        super().__init__()
        self.host = {id(t) for t in host_tensors}
        self.ops: Counter = Counter()
        self.launches = self.syncs = self.slow_foreach = self.casts = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.ops[func] += 1
        name = func.overloadpacket.__name__
        tensors = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if tensors and all(id(t) in self.host for t in tensors):
            return func(*args, **kwargs)  # on a GPU, work of the host on its own tensors
        if name in DATA_DEPENDENT:
            self.syncs += 1
        if name.startswith("_foreach_"):
            slow = per_tensor_launches(args, kwargs)
            self.launches += slow or 1
            self.slow_foreach += slow
        elif not (
            func.is_view
            or func in UNANNOTATED_VIEWS
            or func in ALLOCATIONS
            or func.namespace == "profiler"
        ):
            self.launches += 1
            self.casts += is_cast(func, args, kwargs)
        return func(*args, **kwargs)

    def counts(self) -> Counts:
        return Counts(
            sum(self.ops.values()), self.launches, self.syncs, self.slow_foreach, self.casts
        )


def is_cast(func, args: tuple, kwargs: dict) -> bool:
    """Whether ``func`` copies a floating-point tensor into another floating-point dtype (what
    autocast inserts: weights and activations to bf16, some outputs back to fp32)."""
    if func.overloadpacket.__name__ != "_to_copy" or not args:
        return False
    source, target = args[0].dtype, kwargs.get("dtype")
    return (
        target is not None
        and target != source
        and source.is_floating_point
        and (target.is_floating_point)
    )


class HostReads(TorchFunctionMode):
    """Counts the calls in :data:`HOST_READS` (``item()`` and ``float()`` show as aten
    ``_local_scalar_dense``; ``tolist`` of a CPU tensor shows as nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in HOST_READS:
            self.count += 1
        return func(*args, **(kwargs or {}))


def per_tensor_launches(args: tuple, kwargs: dict) -> int:
    """0 where a ``_foreach_*`` operation takes a GPU's fast path; else one launch per tensor.

    The fast path needs every tensor dense and non-overlapping, and the tensors at one position
    of every list of the same device, dtype and strides (strides of dimensions of size 1 aside,
    as the GPU's check has them)."""
    lists = [a for a in (*args, *kwargs.values()) if isinstance(a, list | tuple) and a]
    lists = [a for a in lists if all(isinstance(t, torch.Tensor) for t in a)]
    if not lists:
        return 0
    for position in zip(*lists, strict=True):
        first = position[0]
        for tensor in position:
            if not is_non_overlapping_and_dense(tensor):
                return len(lists[0])
            if (tensor.dtype, tensor.device) != (first.dtype, first.device) or any(
                size != 1 and mine != theirs
                for size, mine, theirs in zip(first.shape, tensor.stride(), first.stride())
            ):
                return len(lists[0])
    return 0


def foreach_like_a_gpu(trainer: object) -> None:
    """Every optimiser of ``trainer`` on Adam's ``foreach`` path, the one a GPU takes."""
    for value in vars(trainer).values():
        if isinstance(value, torch.optim.Optimizer):
            for group in value.param_groups:
                group["foreach"] = True


def optimiser_steps(trainer: object) -> list[torch.Tensor]:
    """The step counts of ``trainer``'s optimisers: 0-d tensors a GPU's Adam keeps on the host
    (reading them is no synchronisation, adding to them no launch)."""
    return [
        state["step"]
        for value in vars(trainer).values()
        if isinstance(value, torch.optim.Optimizer)
        for state in value.state.values()
        if isinstance(state.get("step"), torch.Tensor)
    ]


def count_step(trainer: object, minibatches: list, warmup: int = 2) -> Counts:
    """The counts of ``trainer.update(minibatches)`` after ``warmup`` updates (optimiser state
    made, first-call work done)."""
    foreach_like_a_gpu(trainer)
    for _ in range(warmup):
        trainer.update(minibatches)
        foreach_like_a_gpu(trainer)  # a phase change may build another optimiser
    reads = HostReads()
    with reads, StepRecorder(optimiser_steps(trainer)) as recorder:
        trainer.update(minibatches)
    return dataclasses.replace(recorder.counts(), syncs=recorder.syncs + reads.count)


def configurations() -> list[step_time.Config]:
    """The tiny MNIST_CNN, and DomainBed's ResNet-18 and ResNet-50 (built for 224x224 images and
    given 64x64 ones: they pool adaptively, so the operations are those of 224x224), 2 images
    per domain, on the CPU."""
    resnet = {"batch_size": 2, "resnet50_augmix": False}
    return [
        step_time.Config("tiny", (1, 28, 28), "RotatedMNIST", "cpu", {"batch_size": 2}),
        step_time.Config("resnet18", (3, 224, 224), "PACS", "cpu", {**resnet, "resnet18": True}),
        step_time.Config("resnet50", (3, 224, 224), "PACS", "cpu", {**resnet, "resnet18": False}),
    ]


#: The side of the images given to the ResNets: the smallest whose last stage keeps more than one
#: position (2x2), as 224x224 does (7x7); a 1x1 stage would hide what a layout costs the pooling.
RESNET_SIDE = 64


def minibatches(config: step_time.Config) -> list[tuple[torch.Tensor, torch.Tensor]]:
    shape = config.input_shape
    if shape[1:] == (224, 224):
        shape = (shape[0], RESNET_SIDE, RESNET_SIDE)
    small = step_time.Config(config.name, shape, config.dataset, config.device)
    return step_time.make_minibatches(small, config.overrides["batch_size"])


#: Algorithms with a later phase: their first is labelled ``phase 1``.
PHASED = {algorithm for algorithm, _, _ in step_time.PHASES.values()}


def trainers(
    names: Sequence[str], config: step_time.Config, precision: str
) -> dict[str, Callable[[], object]]:
    """The rows to count: every algorithm (ImportanceMask once per phase) and, in fp32, the
    floors."""
    makers: dict[str, Callable[[], object]] = {}
    for name in step_time.with_phases(names):
        label = f"{name} phase 1" if name in PHASED else name
        makers[label] = lambda n=name: step_time.build(n, config, precision)
    if precision == precisions.FP32 and "DMG" in names:
        layers = step_time.build("DMG", config).masks.layer_names
        makers[step_time.FLOORS["DMG"]] = lambda: step_time.UnavoidableTraining(config, layers)
    if precision == precisions.FP32 and "CorGrad" in names:
        makers[step_time.FLOORS["CorGrad"]] = lambda: step_time.PerDomainBackward(config)
    return makers


def count(names: Sequence[str], config: step_time.Config, precision: str) -> dict[str, Counts]:
    batches = minibatches(config)
    return {
        label: count_step(make(), batches)
        for label, make in trainers(names, config, precision).items()
    }


def beyond_casts(counts: Counts, fp32: Counts) -> int:
    """Launches a lower precision adds to fp32's step other than casts (goal: none)."""
    return (counts.launches - counts.casts) - (fp32.launches - fp32.casts)


def table(
    config: str, precision: str, counts: dict[str, Counts], fp32: dict[str, Counts] | None = None
) -> str:
    header = (
        f"{'config':<9} {'precision':<9} {'step':<22} {'aten ops':>8} {'launches':>8} "
        f"{'casts':>5} {'+ not casts':>11} {'syncs':>5} {'slow foreach':>12} {'x ERM':>6} "
        f"{'x floor':>7}"
    )
    lines = [header, "-" * len(header)]
    erm = counts.get(step_time.REFERENCE)
    for label, c in counts.items():
        floor = counts.get(step_time.FLOORS.get(label, ""))
        versus_erm = f"{c.launches / erm.launches:6.2f}" if erm else " " * 6
        versus_floor = f"{c.ops / floor.ops:7.2f}" if floor else ""
        added = f"{beyond_casts(c, fp32[label]):+11d}" if fp32 and label in fp32 else " " * 11
        lines.append(
            f"{config:<9} {precision:<9} {label:<22} {c.ops:8d} {c.launches:8d} {c.casts:5d} "
            f"{added} {c.syncs:5d} {c.slow_foreach:12d} {versus_erm} {versus_floor}".rstrip()
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=["tiny"], help="tiny, resnet18, resnet50")
    parser.add_argument(
        "--algorithms",
        nargs="+",
        default=None,
        help=f"counted with {step_time.REFERENCE} (always included); default: every algorithm "
        "step_time.py measures",
    )
    parser.add_argument(
        "--precision",
        nargs="+",
        choices=precisions.CHOICES,
        default=list(precisions.CHOICES),
        help="the precisions to count (default: all)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    wanted = args.algorithms or [
        *step_time.CORE,
        *(name for name in step_time.OPTIONAL if step_time.registered(name)),
    ]
    names = [step_time.REFERENCE, *(n for n in wanted if n != step_time.REFERENCE)]
    print(
        "per training step: aten ops; launches (no views, no allocations; a fast foreach = 1); "
        "casts (launches changing a floating-point dtype); + not casts = launches other than "
        "casts added to fp32's step (counted when fp32 is); host-device syncs; launches of "
        "foreach ops on their per-tensor path; x ERM = launches / ERM's; x floor = aten ops / "
        "the floor's (the unavoidable step)\n"
    )
    for config in configurations():
        if config.name not in args.configs:
            continue
        fp32 = None
        for precision in args.precision:
            counts = count(names, config, precision)
            fp32 = counts if precision == precisions.FP32 else fp32
            shown = fp32 if precision != precisions.FP32 else None
            print(table(config.name, precision, counts, shown), flush=True)
            print()


if __name__ == "__main__":
    main()
