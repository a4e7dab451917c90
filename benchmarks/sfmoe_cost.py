"""SF-MoE's cost next to the dense DeiT-S it is built from, measured side by side.

Both models are this package's ``SFMOE`` built from DomainBed's hparams with random weights
(only cost is measured): with the authors' sparse MoE blocks 5 and 11, and with none, which is
the dense distilled DeiT-S trained by ERM. They get the same minibatches (random tensors) and
are measured the way ``step_time.py`` measures (its functions are imported from it):

* train step: median time of ``update(minibatches)`` over interleaved rounds;
* peak training memory: bytes allocated while building the model and running two train steps
  (weights, gradients, Adam state, activations; on CPU from PyTorch's allocator records, on
  CUDA ``max_memory_allocated``);
* predict: median time of ``predict(x)`` in eval mode under ``torch.no_grad()`` (SF-MoE's
  evaluation capacity is 2.0 against 1.25 in training: its experts run on more slots).

Configurations: ``cpu``, 3 source domains x 2 images of PACS (7 classes), and, when a GPU is
present, ``cuda``, the paper's cost setting: DomainNet (345 classes), 5 source domains x 32 =
160 images a step, fp32. The targets: SF-MoE's train step <= 1.05x and its peak memory <= 1.10x
the dense model's. At a small batch the parameters (28.75 M against 21.67 M, each with its
gradient and two Adam moments) weigh more than the activations, so the CPU memory ratio says
little about the 160-image step.

With ``--precision bf16`` both models are also built with the hparam ``precision = "bf16"``
and timed in the same rounds as their fp32 selves; a second table gives each model's speed-up
(fp32 time / bf16 time) and bf16's peak memory over fp32's, as ``step_time.py --precision
bf16`` does.

Usage: ``python benchmarks/sfmoe_cost.py [--configs cpu cuda] [--batch N] [--quick]
[--threads N] [--clock wall|cpu] [--csv PATH] [--precision fp32|bf16]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import torch
from domainbed import algorithms, hparams_registry
from step_time import (
    Config,
    SpeedUp,
    interleaved_medians,
    lower,
    machine,
    peak_training_memory,
    save,
    synchronizer,
)

from dmg_domainbed import precision as precisions

INPUT_SHAPE = (3, 224, 224)
STEP_LIMIT = 1.05
MEMORY_LIMIT = 1.10
MODELS = {"dense DeiT-S": [], "SFMOE": [5, 11]}  # name -> sfmoe_blocks
REFERENCE = "dense DeiT-S"


@dataclass(frozen=True)
class Setting:
    name: str
    device: str
    dataset: str
    classes: int
    domains: int
    batch: int  # per domain


SETTINGS = [
    Setting("cpu", "cpu", "PACS", 7, 3, 2),
    Setting("cuda", "cuda", "DomainNet", 345, 5, 32),
]


@dataclass
class Row:
    config: str
    device: str
    model: str
    batch: str
    params_m: float
    step_ms: float
    step_ratio: float
    peak_mb: float
    memory_ratio: float
    predict_examples_per_s: float
    predict_ratio: float


def build(setting: Setting, blocks: list[int], precision: str = precisions.FP32):
    hparams = hparams_registry.default_hparams("SFMOE", setting.dataset)
    hparams.update(sfmoe_pretrained=False, sfmoe_blocks=blocks)
    if precision != precisions.FP32:
        hparams[precisions.HPARAM] = precision
    torch.manual_seed(0)
    algorithm = algorithms.get_algorithm_class("SFMOE")(
        INPUT_SHAPE, setting.classes, setting.domains, hparams
    )
    return algorithm.to(setting.device).train()


def minibatches(setting: Setting) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [
        (
            torch.randn(setting.batch, *INPUT_SHAPE, generator=generator).to(setting.device),
            torch.randint(0, setting.classes, (setting.batch,), generator=generator).to(
                setting.device
            ),
        )
        for _ in range(setting.domains)
    ]


def measure(
    setting: Setting,
    rounds: int,
    warmup: int,
    cpu_clock: bool,
    precision: str = precisions.FP32,
) -> tuple[list[Row], list[SpeedUp]]:
    """The fp32 rows of both models; with a lower ``precision``, also each model's speed-up
    over itself in fp32, both timed in the same interleaved rounds."""
    batches = minibatches(setting)
    memory_config = Config(setting.name, INPUT_SHAPE, setting.dataset, setting.device)
    makers = {name: partial(build, setting, blocks) for name, blocks in MODELS.items()}
    lowered = [] if precision == precisions.FP32 else list(MODELS)
    for name in lowered:
        makers[lower(name, precision)] = partial(build, setting, MODELS[name], precision)
    memory = {
        name: peak_training_memory(make, memory_config, batches) for name, make in makers.items()
    }
    trained = {name: make() for name, make in makers.items()}
    sync = synchronizer(setting.device)
    clock = time.process_time if cpu_clock and setting.device == "cpu" else time.perf_counter
    step = interleaved_medians(
        {name: partial(model.update, batches) for name, model in trained.items()},
        rounds,
        warmup,
        sync,
        clock,
    )
    x = torch.cat([x for x, _ in batches])
    for model in trained.values():
        model.eval()
    with torch.no_grad():
        predict = interleaved_medians(
            {name: partial(model.predict, x) for name, model in trained.items()},
            rounds,
            warmup,
            sync,
            clock,
        )
    batch = f"{setting.domains}x{setting.batch}"
    rows = [
        Row(
            setting.name,
            setting.device,
            name,
            batch,
            params_m=sum(p.numel() for p in trained[name].parameters()) / 1e6,
            step_ms=1e3 * step[name],
            step_ratio=step[name] / step[REFERENCE],
            peak_mb=memory[name] / 2**20,
            memory_ratio=memory[name] / memory[REFERENCE],
            predict_examples_per_s=len(x) / predict[name],
            predict_ratio=predict[name] / predict[REFERENCE],
        )
        for name in MODELS
    ]
    speedups = []
    for name in lowered:
        low = lower(name, precision)
        speedups.append(
            SpeedUp(
                setting.name,
                setting.device,
                name,
                batch,
                fp32_step_ms=1e3 * step[name],
                bf16_step_ms=1e3 * step[low],
                fp32_images_per_s=len(x) / step[name],
                bf16_images_per_s=len(x) / step[low],
                step_speedup=step[name] / step[low],
                predict_speedup=predict[name] / predict[low],
                memory_ratio=memory[low] / memory[name],
            )
        )
    return rows, speedups


def table(rows: list[Row]) -> str:
    header = (
        f"{'config':<7} {'model':<13} {'batch':>6} {'params M':>9} {'step ms':>9} {'x dense':>8} "
        f"{'peak MB':>9} {'x dense':>8} {'predict/s':>10} {'x dense':>8}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row.config:<7} {row.model:<13} {row.batch:>6} {row.params_m:9.2f} "
            f"{row.step_ms:9.1f} {row.step_ratio:8.2f} {row.peak_mb:9.1f} "
            f"{row.memory_ratio:8.2f} {row.predict_examples_per_s:10.1f} {row.predict_ratio:8.2f}"
        )
    return "\n".join(lines)


def checks(rows: list[Row]) -> list[str]:
    """The targets, one line each: measured ratio, limit, pass or MISS."""
    lines = []
    for row in rows:
        if row.model == REFERENCE:
            continue
        for what, value, limit in (
            ("step", row.step_ratio, STEP_LIMIT),
            ("peak memory", row.memory_ratio, MEMORY_LIMIT),
        ):
            verdict = "pass" if value <= limit else "MISS"
            label = f"{row.model} {what} / dense"
            lines.append(f"{row.config:<7} {label:<28} {value:5.2f} <= {limit:.2f}  {verdict}")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=None, choices=[s.name for s in SETTINGS])
    parser.add_argument("--quick", action="store_true", help="fewer rounds: a rough figure fast")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: process CPU time on CPU, unaffected by other processes taking the cores",
    )
    parser.add_argument(
        "--batch", type=int, default=None, help="images per domain (default: 2 on CPU, 32 on CUDA)"
    )
    parser.add_argument("--csv", default="sfmoe_cost.csv", help="where to save the table")
    parser.add_argument(
        "--precision",
        choices=precisions.CHOICES,
        default=precisions.FP32,
        help="bf16: also time both models with the hparam precision = bf16 and print their "
        "speed-up over fp32",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rounds, warmup = (3, 1) if args.quick else (9, 2)
    print(f"machine: {machine()}")
    print(
        f"train step and predict: median of {rounds} interleaved rounds after {warmup} warm-up "
        f"calls, {args.clock} clock; ratios are to {REFERENCE} (SFMOE without MoE blocks)\n"
    )
    rows: list[Row] = []
    speedups: list[SpeedUp] = []
    for setting in SETTINGS:
        if args.configs and setting.name not in args.configs:
            continue
        if args.batch is not None:
            setting = dataclasses.replace(setting, batch=args.batch)
        if setting.device == "cuda" and not torch.cuda.is_available():
            print(f"{setting.name}: skipped, no CUDA device (torch.cuda.is_available() is False)")
            continue
        print(
            f"{setting.name}: {setting.dataset}, {setting.domains} domains x {setting.batch} "
            f"images on {setting.device}",
            flush=True,
        )
        measured, compared = measure(setting, rounds, warmup, args.clock == "cpu", args.precision)
        rows += measured
        speedups += compared
    print()
    print(table(rows))
    print()
    print("\n".join(checks(rows)))
    save(rows, speedups, args.csv, args.precision)


if __name__ == "__main__":
    main()
