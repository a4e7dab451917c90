"""Cost of this package's algorithms next to DomainBed's own ERM, measured side by side.

Every algorithm is built in this one process on the same featurizer architecture, hparams and
minibatches (random tensors: only shapes matter for cost), then measured three ways:

* train step: median time of ``update(minibatches)`` over interleaved rounds (each round times
  every algorithm once, in a rotating order), so that noise from other processes on the machine
  hits all algorithms alike. Wall clock by default; ``--clock cpu`` takes the process's CPU time
  instead, which other processes taking the cores do not inflate;
* peak training memory: bytes allocated by building the algorithm and running two train steps
  (weights, optimiser state, gradients, activations; the input batch excluded). On CUDA,
  ``torch.cuda.max_memory_allocated``; on CPU, the allocation and free records of PyTorch's
  CPU allocator captured by ``torch.profiler`` (``profile_memory=True``), summed in time order,
  maximum of the running total: the CPU analogue of the CUDA figure, blind to process-level
  noise (allocator caching, other threads) that makes RSS deltas unreliable;
* predict: median time of ``predict(x)`` in eval mode under ``torch.no_grad()`` on the
  pooled minibatches, as DomainBed's evaluation calls it. For DMG it is also compared with the
  unavoidable cost of its out-of-domain prediction: the plain task network with the input of its
  first masked layer repeated once per source domain (trunk once, masked part D times, batched)
  and the logits averaged; a single plain pass where DMG folds its masks into one.

DMG's train step and memory are also compared with their unavoidable floor: the plain task
network trained like Aggregate, with one per-example Bernoulli draw per unit on the inputs of
DMG's masked layers (the draws, the multiplications and the masked activations kept for the
backward pass), but no mask gradients, penalty or mask optimiser. Where that floor is already
over a target, no implementation of DMG can meet it; the checks say so. CorGrad's floor is its
per-domain backward passes without its rule: the same network, hparams and optimiser, each
domain's minibatch through its own forward and backward pass, the gradients summed, one Adam step.

ImportanceMask is measured in both phases: ``ImportanceMask``, its phase 1 (one network copy
per source domain), and ``ImportanceMask phase 2`` (one network, per-weight learning rates),
built with ``phase1_steps = 1`` and measured after that one phase-1 update (its peak memory
includes that update's).

With ``--precision bf16`` every algorithm is also built with the hparam ``precision = "bf16"``
(:mod:`dmg_domainbed.precision`: bf16 autocast, ``channels_last`` images) and timed in the same
interleaved rounds as its fp32 self; a second table gives, per algorithm, the train step and
images/s of both and the speed-up (fp32 time / bf16 time), for the train step and for
``predict``, and the peak memory of bf16 over fp32. Without the flag, the output is as above.

Usage: ``python benchmarks/step_time.py [--quick] [--csv PATH] [--algorithms ...]
[--configs ...] [--threads N] [--clock wall|cpu] [--precision fp32|bf16]``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gc
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial

import torch
import torchvision
from domainbed import algorithms, datasets, hparams_registry
from torch import nn
from torch.profiler import ProfilerActivity, profile

from dmg_domainbed import precision as precisions
from dmg_domainbed.algorithms.base import featurizer_classifier, pooled

REFERENCE = "ERM"
CORE = ("Aggregate", "MultiHead", "DMG")
OPTIONAL = ("CorGrad", "ImportanceMask")  # measured and reported when registered
STEP_LIMITS = {"Aggregate": 1.02, "MultiHead": 1.05, "DMG": 1.10}
MEMORY_LIMITED = ("Aggregate", "MultiHead", "DMG")
# CorGrad runs one backward pass per source domain: its targets are per device, and over its floor.
CORGRAD_STEP_LIMITS = {"cpu": 1.6, "cuda": 2.0}
CORGRAD_FLOOR_LIMIT = 1.2
MEMORY_LIMIT = 1.10
PREDICT_FLOOR_LIMIT = 1.15
MIN_SAMPLE_S = 0.05  # a timing sample repeats fast calls until it lasts about this long
NUM_DOMAINS = 3
NUM_CLASSES = 10
EMBEDDED_DATASET = "RotatedDigits"


@dataclass(frozen=True)
class Config:
    """One featurizer/data shape on one device."""

    name: str
    input_shape: tuple[int, ...]
    dataset: str  # the dataset whose DomainBed hparams every algorithm gets
    device: str
    overrides: dict = field(default_factory=dict)
    note: str = ""


@dataclass
class Row:
    config: str
    device: str
    algorithm: str
    batch: int
    step_ms: float
    step_ratio: float
    peak_mb: float
    memory_ratio: float
    predict_ms: float
    predict_examples_per_s: float
    predict_ratio: float
    predict_floor_ms: float | None = None
    predict_vs_floor: float | None = None
    step_floor_ratio: float | None = None  # DMG's or CorGrad's unavoidable train step / ERM's
    memory_floor_ratio: float | None = None  # DMG's or CorGrad's unavoidable peak memory / ERM's


@dataclass
class SpeedUp:
    """One algorithm in bf16 next to itself in fp32, measured in the same rounds."""

    config: str
    device: str
    algorithm: str
    batch: str  # domains x images per domain
    fp32_step_ms: float
    bf16_step_ms: float
    fp32_images_per_s: float
    bf16_images_per_s: float
    step_speedup: float  # fp32 step time / bf16 step time
    predict_speedup: float  # fp32 predict time / bf16 predict time
    memory_ratio: float  # bf16 peak training memory / fp32's


def configurations() -> list[Config]:
    """MNIST_CNN 28x28, the embedded dataset's MLP, the Wide ResNet-16-2 at 32x32 (DomainBed's
    image hparams) and the paper's ResNet-18 at 224x224 (a small batch) on CPU; ResNet-50
    224x224 on CUDA."""
    shape = tuple(datasets.get_dataset_class(EMBEDDED_DATASET).INPUT_SHAPE)
    return [
        Config("mnist_cnn", (1, 28, 28), "RotatedMNIST", "cpu"),
        Config("mlp", shape, EMBEDDED_DATASET, "cpu", note=f"{EMBEDDED_DATASET} hparams"),
        Config(
            "wide_resnet",
            (3, 32, 32),
            "PACS",
            "cpu",
            {},
            "DomainBed's featurizer for 32x32 images (a manifest's input_size 32)",
        ),
        Config(
            "resnet18",
            (3, 224, 224),
            "PACS",
            "cpu",
            {"batch_size": 4, "resnet18": True, "resnet50_augmix": False},
            "the paper's backbone, random weights, timing only",
        ),
        Config(
            "resnet50",
            (3, 224, 224),
            "PACS",
            "cuda",
            {"batch_size": 32, "resnet18": False, "resnet50_augmix": False},
            "random weights, timing only",
        ),
    ]


def registered(name: str) -> bool:
    try:
        algorithms.get_algorithm_class(name)
    except NotImplementedError:
        return False
    return True


# Algorithms measured in a later phase of their run, as a row of their own: (algorithm, the
# hparams that bring it there, updates run before it is measured). ImportanceMask's phase 1 (the
# per-domain copies) is its own row.
PHASES = {
    "ImportanceMask phase 2": ("ImportanceMask", {"phase1_steps": 1, "freeze_step": 10**9}, 1)
}


def with_phases(names: Sequence[str]) -> list[str]:
    """``names`` with each later phase of theirs (:data:`PHASES`) after its algorithm."""
    later = [[phase for phase, (of, _, _) in PHASES.items() if of == name] for name in names]
    return [label for name, phases in zip(names, later) for label in [name, *phases]]


def hparams_for(name: str, config: Config, precision: str = precisions.FP32) -> dict:
    name, overrides, _ = PHASES.get(name, (name, {}, 0))
    hparams = hparams_registry.default_hparams(name, config.dataset)
    hparams.update(config.overrides)
    hparams.update(overrides)
    if precision != precisions.FP32:
        hparams[precisions.HPARAM] = precision
    return hparams


@contextlib.contextmanager
def random_resnet_weights() -> Iterator[None]:
    """Make torchvision's ResNet builders ignore ``pretrained=True``: nothing is downloaded."""
    builders = {name: getattr(torchvision.models, name) for name in ("resnet18", "resnet50")}
    for name, builder in builders.items():
        setattr(torchvision.models, name, lambda *_, _build=builder, **__: _build(weights=None))
    try:
        yield
    finally:
        for name, builder in builders.items():
            setattr(torchvision.models, name, builder)


def build(name: str, config: Config, precision: str = precisions.FP32) -> algorithms.Algorithm:
    """``name`` built as DomainBed builds it; a later phase (:data:`PHASES`) after the updates
    that bring it there."""
    algorithm_name, _, updates = PHASES.get(name, (name, {}, 0))
    torch.manual_seed(0)
    with random_resnet_weights():
        algorithm = algorithms.get_algorithm_class(algorithm_name)(
            config.input_shape, NUM_CLASSES, NUM_DOMAINS, hparams_for(name, config, precision)
        )
    algorithm.to(config.device).train()
    if updates:
        minibatches = make_minibatches(config, hparams_for(name, config)["batch_size"])
        for _ in range(updates):
            algorithm.update(minibatches)
    return algorithm


def make_minibatches(config: Config, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [
        (
            torch.randn(batch, *config.input_shape, generator=generator).to(config.device),
            torch.randint(0, NUM_CLASSES, (batch,), generator=generator).to(config.device),
        )
        for _ in range(NUM_DOMAINS)
    ]


def synchronizer(device: str) -> Callable[[], None]:
    return torch.cuda.synchronize if device == "cuda" else lambda: None


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Silence the profiler back end's start/stop banners, which it writes to fd 2 directly."""
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def peak_training_memory(make: Callable[[], object], config: Config, minibatches: list) -> int:
    """Peak bytes allocated while building a trainer with ``make()`` and running two steps."""
    # A bf16 algorithm holds its own bound methods (a reference cycle): collect the trainers
    # measured before, so that their memory is not freed, and counted, during this measurement.
    gc.collect()
    if config.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        baseline = torch.cuda.memory_allocated()
        algorithm = make()
        for _ in range(2):
            algorithm.update(minibatches)
        torch.cuda.synchronize()
        del algorithm
        return torch.cuda.max_memory_allocated() - baseline
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    profiler = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with quiet_stderr():
        profiler.start()
    try:
        algorithm = make()
        for _ in range(2):
            algorithm.update(minibatches)
        del algorithm
    finally:
        with quiet_stderr():
            profiler.stop()
    records = sorted(
        (event.start_ns(), event.nbytes())
        for event in profiler.profiler.kineto_results.events()
        if event.name() == "[memory]" and event.device_type() == torch.autograd.DeviceType.CPU
    )
    live = peak = 0
    for _, nbytes in records:
        live += nbytes
        peak = max(peak, live)
    return peak


def interleaved_medians(
    calls: dict[str, Callable[[], object]],
    rounds: int,
    warmup: int,
    sync: Callable[[], None],
    clock: Callable[[], float],
) -> dict[str, float]:
    """Median seconds per call of each callable, timed in ``rounds`` rotating rounds."""

    def seconds_per_call(call: Callable[[], object], repeats: int) -> float:
        sync()
        start = clock()
        for _ in range(repeats):
            call()
        sync()
        return (clock() - start) / repeats

    for call in calls.values():
        for _ in range(warmup):
            call()
    fastest = min(seconds_per_call(call, 1) for call in calls.values())
    repeats = max(1, math.ceil(MIN_SAMPLE_S / fastest))
    names = list(calls)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(seconds_per_call(calls[name], repeats))
    return {name: statistics.median(times) for name, times in samples.items()}


def unavoidable_predict(
    dmg: algorithms.Algorithm, config: Config
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The plain task network, input of DMG's first masked layer repeated once per domain."""
    with random_resnet_weights():
        network = featurizer_classifier(config.input_shape, NUM_CLASSES, hparams_for("DMG", config))
    network = network.to(config.device).eval()
    if dmg.masks.fold:
        return network
    first = dict(network.named_modules())[dmg.masks.layer_names[0]]

    def repeat(module: nn.Module, args: tuple) -> tuple:
        x = args[0]
        return (x.repeat(NUM_DOMAINS, *([1] * (x.dim() - 1))),) + tuple(args[1:])

    first.register_forward_pre_hook(repeat)
    return lambda x: network(x).view(NUM_DOMAINS, len(x), -1).mean(0)


class UnavoidableTraining:
    """DMG's training step without the work that is DMG's choice (see the module docstring).

    The task network with DMG's hparams and Aggregate's optimiser; a pre-hook on each layer DMG
    masks multiplies its input by a fresh Bernoulli(1/2) draw per example and unit (per channel
    of a conv activation), so the draws, the products and the masked activations stored for
    the backward pass cost what they cost in DMG.
    """

    def __init__(self, config: Config, layer_names: Sequence[str]) -> None:
        hparams = hparams_for("DMG", config)
        torch.manual_seed(0)
        with random_resnet_weights():
            self.network = featurizer_classifier(config.input_shape, NUM_CLASSES, hparams)
        self.network.to(config.device).train()
        modules = dict(self.network.named_modules())
        for name in layer_names:
            modules[name].register_forward_pre_hook(self.mask_input)
        self.optimizer = torch.optim.Adam(
            self.network.parameters(), lr=hparams["lr"], weight_decay=hparams["weight_decay"]
        )

    @staticmethod
    def mask_input(module: nn.Module, args: tuple) -> tuple:
        x = args[0]
        drawn = torch.rand(x.shape[:2], device=x.device).lt_(0.5)
        return (x * drawn.view(*drawn.shape, *(1,) * (x.dim() - 2)),) + tuple(args[1:])

    def update(self, minibatches: list) -> dict[str, float]:
        x, y = pooled(minibatches)
        loss = nn.functional.cross_entropy(self.network(x), y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return {"loss": loss.item()}


class PerDomainBackward:
    """CorGrad's training step without its rule: the network, hparams (``freeze_bn`` included)
    and optimiser CorGrad builds, one forward and backward pass per source domain, the
    gradients summed by autograd, one Adam step, the mean loss read back once (as ERM and
    CorGrad read their logged floats)."""

    def __init__(self, config: Config) -> None:
        hparams = hparams_for("CorGrad", config)
        torch.manual_seed(0)
        with random_resnet_weights():
            self.network = featurizer_classifier(config.input_shape, NUM_CLASSES, hparams)
        self.network.to(config.device).train()
        self.optimizer = torch.optim.Adam(
            self.network.parameters(), lr=hparams["lr"], weight_decay=hparams["weight_decay"]
        )

    def update(self, minibatches: list) -> dict[str, float]:
        self.optimizer.zero_grad(set_to_none=True)
        losses = []
        for x, y in minibatches:
            loss = nn.functional.cross_entropy(self.network(x), y)
            loss.backward()
            losses.append(loss.detach())
        self.optimizer.step()
        # one read of the host per step, as ERM's and CorGrad's logged floats
        return {"loss": torch.stack(losses).mean().item()}


# The unavoidable training step of the algorithms that have one (see the module docstring).
FLOORS = {"DMG": "DMG floor", "CorGrad": "CorGrad floor"}


def lower(name: str, precision: str) -> str:
    """The name of ``name``'s trainer in a lower ``precision``."""
    return f"{name} {precision}"


def measure(
    config: Config,
    names: Sequence[str],
    rounds: int,
    warmup: int,
    cpu_clock: bool,
    precision: str = precisions.FP32,
) -> tuple[list[Row], list[SpeedUp]]:
    """The fp32 rows of every algorithm; with a lower ``precision``, also each algorithm's
    speed-up over itself in fp32, both timed in the same interleaved rounds."""
    batch = hparams_for(REFERENCE, config)["batch_size"]
    minibatches = make_minibatches(config, batch)
    makers: dict[str, Callable[[], object]] = {name: partial(build, name, config) for name in names}
    lowered = [] if precision == precisions.FP32 else list(names)
    for name in lowered:
        makers[lower(name, precision)] = partial(build, name, config, precision)
    if "DMG" in names:
        layers = build("DMG", config).masks.layer_names
        makers[FLOORS["DMG"]] = partial(UnavoidableTraining, config, layers)
    if "CorGrad" in names:
        makers[FLOORS["CorGrad"]] = partial(PerDomainBackward, config)
    memory = {
        name: peak_training_memory(make, config, minibatches) for name, make in makers.items()
    }
    trainers = {name: make() for name, make in makers.items()}
    built = {name: trainers[name] for name in [*names, *(lower(n, precision) for n in lowered)]}
    sync = synchronizer(config.device)
    clock = time.process_time if cpu_clock and config.device == "cpu" else time.perf_counter
    step = interleaved_medians(
        {name: partial(trainer.update, minibatches) for name, trainer in trainers.items()},
        rounds,
        warmup,
        sync,
        clock,
    )
    x = torch.cat([x for x, _ in minibatches])
    predict_calls = {name: partial(algorithm.predict, x) for name, algorithm in built.items()}
    if "DMG" in built:
        predict_calls["floor"] = partial(unavoidable_predict(built["DMG"], config), x)
    for algorithm in built.values():
        algorithm.eval()
    with torch.no_grad():
        predict = interleaved_medians(predict_calls, rounds, warmup, sync, clock)
    rows = []
    for name in names:
        row = Row(
            config.name,
            config.device,
            name,
            batch,
            step_ms=1e3 * step[name],
            step_ratio=step[name] / step[REFERENCE],
            peak_mb=memory[name] / 2**20,
            memory_ratio=memory[name] / memory[REFERENCE],
            predict_ms=1e3 * predict[name],
            predict_examples_per_s=len(x) / predict[name],
            predict_ratio=predict[name] / predict[REFERENCE],
        )
        if name == "DMG":
            row.predict_floor_ms = 1e3 * predict["floor"]
            row.predict_vs_floor = predict[name] / predict["floor"]
        if name in FLOORS:
            row.step_floor_ratio = step[FLOORS[name]] / step[REFERENCE]
            row.memory_floor_ratio = memory[FLOORS[name]] / memory[REFERENCE]
        rows.append(row)
    images = NUM_DOMAINS * batch
    speedups = [
        SpeedUp(
            config.name,
            config.device,
            name,
            f"{NUM_DOMAINS}x{batch}",
            fp32_step_ms=1e3 * step[name],
            bf16_step_ms=1e3 * step[lower(name, precision)],
            fp32_images_per_s=images / step[name],
            bf16_images_per_s=images / step[lower(name, precision)],
            step_speedup=step[name] / step[lower(name, precision)],
            predict_speedup=predict[name] / predict[lower(name, precision)],
            memory_ratio=memory[lower(name, precision)] / memory[name],
        )
        for name in lowered
    ]
    return rows, speedups


def table(rows: list[Row]) -> str:
    header = (
        f"{'config':<10} {'algorithm':<15} {'batch':>9} {'step ms':>9} {'x ERM':>6} "
        f"{'peak MB':>9} {'x ERM':>6} {'predict/s':>10} {'x ERM':>6} {'x floor':>7}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        floor = f"{row.predict_vs_floor:7.2f}" if row.predict_vs_floor is not None else " " * 7
        lines.append(
            f"{row.config:<10} {row.algorithm:<15} {f'{NUM_DOMAINS}x{row.batch}':>9} "
            f"{row.step_ms:9.2f} {row.step_ratio:6.2f} {row.peak_mb:9.1f} {row.memory_ratio:6.2f} "
            f"{row.predict_examples_per_s:10.0f} {row.predict_ratio:6.2f} {floor}".rstrip()
        )
    return "\n".join(lines)


def speedup_table(speedups: list[SpeedUp], precision: str) -> str:
    header = (
        f"{'config':<10} {'algorithm':<15} {'batch':>9} {'fp32 ms':>9} {precision + ' ms':>9} "
        f"{'fp32 img/s':>10} {precision + ' img/s':>10} {'step x':>7} {'predict x':>9} "
        f"{'memory':>7}"
    )
    lines = [header, "-" * len(header)]
    for s in speedups:
        lines.append(
            f"{s.config:<10} {s.algorithm:<15} {s.batch:>9} "
            f"{s.fp32_step_ms:9.2f} {s.bf16_step_ms:9.2f} {s.fp32_images_per_s:10.0f} "
            f"{s.bf16_images_per_s:10.0f} {s.step_speedup:7.2f} {s.predict_speedup:9.2f} "
            f"{s.memory_ratio:7.2f}"
        )
    return "\n".join(lines)


def checks(rows: list[Row]) -> list[str]:
    """The performance targets, one line each: measured ratio, limit, pass or MISS."""
    lines = []

    def check(row: Row, what: str, value: float, limit: float, floor: float | None = None):
        verdict = "pass" if value <= limit else "MISS"
        line = f"{row.config:<10} {what:<32} {value:5.2f} <= {limit:.2f}  {verdict}"
        if floor is not None:
            reachable = "the target is under the floor" if floor > limit else "floor"
            line += f"  ({reachable}: {floor:.2f})"
        lines.append(line)

    for row in rows:
        limit = STEP_LIMITS.get(row.algorithm)
        if row.algorithm == "CorGrad":
            limit = CORGRAD_STEP_LIMITS[row.device]
        if limit is not None:
            name = row.algorithm
            check(row, f"{name} step / ERM", row.step_ratio, limit, row.step_floor_ratio)
        if row.algorithm in MEMORY_LIMITED:
            check(
                row,
                f"{row.algorithm} peak memory / ERM",
                row.memory_ratio,
                MEMORY_LIMIT,
                row.memory_floor_ratio,
            )
        if row.algorithm == "CorGrad" and row.step_floor_ratio:
            over_floor = row.step_ratio / row.step_floor_ratio
            check(row, "CorGrad step / its floor", over_floor, CORGRAD_FLOOR_LIMIT)
        if row.predict_vs_floor is not None:
            check(row, "DMG predict / unavoidable floor", row.predict_vs_floor, PREDICT_FLOOR_LIMIT)
    return lines


def machine() -> str:
    gpu = f"GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else "no GPU"
    return (
        f"{platform.machine()}, {os.cpu_count()} CPU cores, {gpu}, "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads)"
    )


def save(rows: Sequence, speedups: Sequence[SpeedUp], csv_path: str, precision: str) -> None:
    """Write ``rows`` to ``csv_path``; with ``speedups``, print their table and write them beside
    it (``<csv>_<precision>.csv``)."""
    write_csv(rows, csv_path)
    if speedups:
        print(
            f"\n{precision} against fp32, same rounds: step x and predict x = fp32 time / "
            f"{precision} time (above 1: {precision} is faster); memory = "
            f"{precision} peak training memory / fp32's"
        )
        print(speedup_table(speedups, precision))
        write_csv(speedups, os.path.splitext(csv_path)[0] + f"_{precision}.csv")


def write_csv(rows: Sequence, path: str) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(asdict(rows[0])))
        writer.writeheader()
        writer.writerows(asdict(row) for row in rows)
    print(f"\nsaved {path}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds: a rough figure fast")
    parser.add_argument("--csv", default="step_time.csv", help="where to save the table")
    parser.add_argument(
        "--algorithms",
        nargs="+",
        default=None,
        help=f"compared with {REFERENCE} (always included); default: {', '.join(CORE)} and, "
        f"when registered, {', '.join(OPTIONAL)}",
    )
    parser.add_argument(
        "--configs", nargs="+", default=None, help="mnist_cnn, mlp, wide_resnet, resnet18, resnet50"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (default 1: sweeps run one single-threaded job per core, and "
        "threads of small steps contend on a busy machine)",
    )
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: process CPU time on CPU configurations, unaffected by other processes taking "
        "the cores (use with --threads 1: idle threads spin and count)",
    )
    parser.add_argument(
        "--precision",
        choices=precisions.CHOICES,
        default=precisions.FP32,
        help="bf16: also time every algorithm with the hparam precision = bf16 and print its "
        "speed-up over fp32, per algorithm (bf16 needs a GPU with bf16 support, or a CPU with "
        "AVX512-BF16/AMX, to be faster)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rounds, warmup = (7, 2) if args.quick else (21, 3)
    wanted = args.algorithms or [*CORE, *(name for name in OPTIONAL if registered(name))]
    names = with_phases([REFERENCE, *(name for name in wanted if name != REFERENCE)])

    print(f"machine: {machine()}")
    print(
        f"{NUM_DOMAINS} source domains; train step and predict: median of {rounds} interleaved "
        f"rounds after {warmup} warm-up calls, {args.clock} clock; "
        f"ratios are to {REFERENCE} (lower is cheaper)"
    )
    print(
        "peak MB: weights + optimiser state + gradients + activations of two train steps "
        "(CPU: PyTorch allocator records via torch.profiler; CUDA: max_memory_allocated)"
    )
    print(
        "x floor: DMG predict / plain network with the input of the first masked layer "
        "repeated per domain"
    )
    print(
        "floor (checks): DMG's unavoidable train step and memory / ERM's: the plain network "
        "with a Bernoulli draw on each masked layer's input, no mask learning; CorGrad's: its "
        "per-domain forward and backward passes and Adam, without its rule\n"
    )
    rows: list[Row] = []
    speedups: list[SpeedUp] = []
    for config in configurations():
        if args.configs and config.name not in args.configs:
            continue
        if config.device == "cuda" and not torch.cuda.is_available():
            print(f"{config.name}: skipped, no CUDA device (torch.cuda.is_available() is False)")
            continue
        note = f" ({config.note})" if config.note else ""
        print(f"{config.name}: input {config.input_shape} on {config.device}{note}", flush=True)
        measured, compared = measure(
            config, names, rounds, warmup, args.clock == "cpu", args.precision
        )
        rows += measured
        speedups += compared
    print()
    print(table(rows))
    print()
    print("\n".join(checks(rows)))
    save(rows, speedups, args.csv, args.precision)


if __name__ == "__main__":
    main()
