"""What the ``averaging`` hparam costs a training step: ERM's step time with and without it.

For each configuration (a DomainBed featurizer on inputs that select it), ERM is built twice
from one seed, once plainly and once with ``{"averaging": "sma", "averaging_start": 0}`` (every
step averaged: the most work averaging does; ``ema`` does the same work), and both train on the
same minibatches of random data, one domain per source domain. The steps are timed in
interleaved rounds (each round times one step of each, in turn) so that other work on the
machine hits both alike; the table gives per configuration the median step time of each, the
difference, and the values averaged (one more copy of them is held in memory). On a CPU the
clock is the process's CPU time, all threads, which other work does not inflate; on a GPU it is
the wall time, once the device is done (``torch.cuda.synchronize``).

Usage: ``python benchmarks/averaging_cost.py [--configs mlp mnist_cnn resnet18] [--rounds N]
[--threads N] [--device cpu|cuda] [--quick]`` (``--quick``: the MLP, 3 rounds). ResNet-18 gets
random weights (no download): only the number of weights matters here.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from dataclasses import dataclass

import torch
import torchvision
from domainbed import algorithms, hparams_registry

from dmg_domainbed import averaging

NUM_CLASSES, NUM_DOMAINS = 7, 3
AVERAGED = {"averaging": "sma", "averaging_start": 0}


@dataclass(frozen=True)
class Config:
    name: str
    dataset: str  # whose default hparams ERM takes
    input_shape: tuple[int, ...]
    batch: int  # per source domain
    hparams: dict


CONFIGS = {
    "mlp": Config("mlp", "RotatedDigits", (64,), 32, {}),  # DomainBed's MLP
    "mnist_cnn": Config("mnist_cnn", "Debug28", (3, 28, 28), 32, {}),
    "resnet18": Config(
        "resnet18", "PACS", (3, 224, 224), 8, {"resnet18": True, "resnet50_augmix": False}
    ),
}


def build(config: Config, extra: dict, device: str) -> algorithms.Algorithm:
    hparams = hparams_registry.default_hparams("ERM", config.dataset) | config.hparams | extra
    torch.manual_seed(0)
    return algorithms.ERM(config.input_shape, NUM_CLASSES, NUM_DOMAINS, hparams).to(device)


def minibatches(config: Config, device: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        (
            torch.randn(config.batch, *config.input_shape, generator=generator).to(device),
            torch.randint(0, NUM_CLASSES, (config.batch,), generator=generator).to(device),
        )
        for _ in range(NUM_DOMAINS)
    ]


def timed_step(algorithm, batches, device: str) -> float:
    """One update's time: on a CPU, the process's CPU time (all threads), which other work on
    the machine does not inflate; on a GPU, the wall time once the device is done."""
    if device == "cuda":
        torch.cuda.synchronize()
    clock = time.perf_counter if device == "cuda" else time.process_time
    start = clock()
    algorithm.update(batches)
    if device == "cuda":
        torch.cuda.synchronize()
    return clock() - start


@dataclass(frozen=True)
class Row:
    config: str
    plain_ms: float
    averaged_ms: float
    values: int  # floating-point values averaged

    @property
    def overhead_ms(self) -> float:
        return self.averaged_ms - self.plain_ms


def measure(config: Config, rounds: int, device: str) -> Row:
    plain, averaged = build(config, {}, device), build(config, AVERAGED, device)
    batches = minibatches(config, device)
    for algorithm in (plain, averaged):  # warm-up: first-call costs, the average's first copy
        algorithm.update(batches)
    times: dict[str, list[float]] = {"plain": [], "averaged": []}
    for round_ in range(rounds):
        order = [("plain", plain), ("averaged", averaged)]
        for name, algorithm in order[round_ % 2 :] + order[: round_ % 2]:
            times[name].append(timed_step(algorithm, batches, device))
    values = sum(t.numel() for t in averaging.averaged_state(averaged).values())
    median = {name: 1e3 * statistics.median(found) for name, found in times.items()}
    return Row(config.name, median["plain"], median["averaged"], values)


def table(rows: list[Row]) -> str:
    lines = [
        f"{'config':<10} {'plain ms':>9} {'sma ms':>9} {'+ ms':>8} {'+ %':>6} {'averaged':>10}",
    ]
    for row in rows:
        percent = 100 * row.overhead_ms / row.plain_ms
        lines.append(
            f"{row.config:<10} {row.plain_ms:>9.1f} {row.averaged_ms:>9.1f} "
            f"{row.overhead_ms:>8.2f} {percent:>6.1f} {row.values / 1e6:>9.2f}M"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--quick", action="store_true", help="the MLP alone, 3 rounds")
    args = parser.parse_args(argv)
    if args.quick:
        args.configs, args.rounds = ["mlp"], 3
    if args.threads:
        torch.set_num_threads(args.threads)
    resnet18 = torchvision.models.resnet18
    torchvision.models.resnet18 = lambda pretrained=False, **kwargs: resnet18()  # random weights
    try:
        rows = [measure(CONFIGS[name], args.rounds, args.device) for name in args.configs]
    finally:
        torchvision.models.resnet18 = resnet18
    device = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor()
    print(
        f"ERM, one step of {NUM_DOMAINS} source domains, median of {args.rounds} interleaved "
        f"rounds; torch {torch.__version__}, {args.device} ({device or platform.machine()}), "
        f"{torch.get_num_threads()} threads, {'wall' if args.device == 'cuda' else 'CPU'} time. "
        "sma: averaging from step 0; + ms: what averaging "
        "adds to a step; averaged: values averaged (held once more in memory)"
    )
    print(table(rows))
    return rows


if __name__ == "__main__":
    main()
