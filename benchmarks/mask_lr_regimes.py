"""DMG's two mask learning-rate regimes, measured with DomainBed's own ``train.py``.

The authors train the mask logits with Adam at 1e-4 for 50-150 epochs; DMG's default here is
1e-3 for DomainBed's budget of 5,000 steps (it was 1e-2). This script trains DMG on the embedded
RotatedDigits (no download) at each ``--mask_lr``, one ``python -m domainbed.scripts.train``
process per (mask_lr, seed), with ``--save_model_every_checkpoint``, and reads back from every
checkpoint:

* soft IoU between the source domains' masks ``m_d = sigmoid(logits)`` (the overlap term of
  Eq. 2, averaged over pairs and layers) and hard IoU of ``m_d > 0.5`` (the masks the authors'
  known-domain prediction uses);
* undecided units: the share of mask probabilities between 0.1 and 0.9 (a soft mask);
* source validation accuracy (train.py's ``env<i>_out_acc`` of the source domains, averaged,
  DomainBed's training-domain validation) and test-domain accuracy (``env<t>_in_acc``, what
  ``collect_results`` reports).

It prints the mean over seeds (and the standard deviation of the accuracies) per mask_lr and
checkpoint, and can save every row as CSV (``--csv``).

Usage: ``python benchmarks/mask_lr_regimes.py [--mask_lr 1e-4 1e-3 1e-2] [--seeds 0 1 2]
[--steps 5000] [--checkpoint_freq 500] [--test_env 0] [--jobs 2] [--csv PATH]``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

from dmg_domainbed.algorithms.dmg.masks import hard_masks, mean_over_pairs, pairwise_soft_iou
from dmg_domainbed.checkpoint_files import load_checkpoint

DATASET = "RotatedDigits"
UNDECIDED = (0.1, 0.9)


def train_command(mask_lr: float, seed: int, args: argparse.Namespace, output: Path) -> list[str]:
    """DomainBed's own train.py, unmodified, for one DMG run."""
    return [
        sys.executable,
        "-m",
        "domainbed.scripts.train",
        "--algorithm",
        "DMG",
        "--dataset",
        DATASET,
        "--test_envs",
        str(args.test_env),
        "--data_dir",
        str(output / "data"),
        "--steps",
        str(args.steps),
        "--checkpoint_freq",
        str(args.checkpoint_freq),
        "--trial_seed",
        str(seed),
        "--seed",
        str(seed),
        "--hparams",
        json.dumps({"mask_lr": mask_lr}),
        "--save_model_every_checkpoint",
        "--output_dir",
        str(output),
    ]


def run_all(args: argparse.Namespace, root: Path) -> dict[tuple[float, int], Path]:
    """Every (mask_lr, seed) run, ``--jobs`` at a time; their output folders."""
    environment = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    pending = [(lr, seed) for lr in args.mask_lr for seed in args.seeds]
    folders = {key: root / f"mask_lr{key[0]:g}_seed{key[1]}" for key in pending}
    running: list[tuple[tuple[float, int], subprocess.Popen]] = []
    while pending or running:
        while pending and len(running) < args.jobs:
            key = pending.pop(0)
            folders[key].mkdir(parents=True)
            log = open(folders[key] / "train.log", "w")
            command = train_command(*key, args, folders[key])
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=environment
            )
            running.append((key, process))
        time.sleep(0.5)
        for key, process in list(running):
            if process.poll() is None:
                continue
            running.remove((key, process))
            if process.returncode != 0:
                tail = (folders[key] / "train.log").read_text()[-3000:]
                raise SystemExit(f"train.py failed for mask_lr={key[0]}, seed={key[1]}:\n{tail}")
            print(f"  done: mask_lr={key[0]:g}, seed {key[1]}", file=sys.stderr)
    return folders


def mask_statistics(model_file: Path) -> dict[str, float]:
    """Soft and hard IoU between domains (mean over pairs and layers) and undecided units."""
    state = load_checkpoint(model_file, "cpu")["model_dict"]
    layers = [value for key, value in sorted(state.items()) if key.startswith("masks.logits.")]
    probabilities = [torch.sigmoid(logits) for logits in layers]
    soft = [mean_over_pairs(pairwise_soft_iou(p)).item() for p in probabilities]
    hard = [mean_over_pairs(pairwise_soft_iou(hard_masks(p))).item() for p in probabilities]
    flat = torch.cat([p.flatten() for p in probabilities])
    undecided = ((flat > UNDECIDED[0]) & (flat < UNDECIDED[1])).double().mean().item()
    return {
        "soft_iou": statistics.fmean(soft),
        "hard_iou": statistics.fmean(hard),
        "undecided": undecided,
    }


def checkpoint_rows(mask_lr: float, seed: int, folder: Path, test_env: int) -> list[dict]:
    """One row per checkpoint: mask statistics from model_step<N>.pkl, accuracies from the
    record train.py logged at that step."""
    rows = []
    for line in (folder / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        step = record["step"]
        sources = [
            value
            for key, value in record.items()
            if key.endswith("_out_acc") and key != f"env{test_env}_out_acc"
        ]
        rows.append(
            {
                "mask_lr": mask_lr,
                "seed": seed,
                "step": step,
                **mask_statistics(folder / f"model_step{step}.pkl"),
                "source_val_acc": statistics.fmean(sources),
                "test_acc": record[f"env{test_env}_in_acc"],
            }
        )
    return rows


def _mean(group: list[dict], key: str) -> float:
    return statistics.fmean(row[key] for row in group)


def _percent(group: list[dict], key: str) -> str:
    """Mean and standard deviation over the group, in %."""
    values = [100 * row[key] for row in group]
    deviation = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):5.1f} +/- {deviation:3.1f}"


def table(rows: list[dict]) -> str:
    """Mean over seeds per (mask_lr, step); accuracies in % with the standard deviation."""
    groups: dict[tuple[float, int], list[dict]] = defaultdict(list)
    for row in rows:
        groups[(row["mask_lr"], row["step"])].append(row)
    header = (
        f"{'mask_lr':>8} {'step':>5} {'soft IoU':>9} {'hard IoU':>9} {'undecided':>10} "
        f"{'source val %':>13} {'test %':>12}"
    )
    lines = [header, "-" * len(header)]
    previous = None
    for (lr, step), group in sorted(groups.items()):
        if previous is not None and lr != previous:
            lines.append("")
        previous = lr
        lines.append(
            f"{lr:>8g} {step:>5d} {_mean(group, 'soft_iou'):>9.3f} "
            f"{_mean(group, 'hard_iou'):>9.3f} {100 * _mean(group, 'undecided'):>9.1f}% "
            f"{_percent(group, 'source_val_acc'):>13} {_percent(group, 'test_acc'):>12}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mask_lr", type=float, nargs="+", default=[1e-4, 1e-3, 1e-2])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--checkpoint_freq", type=int, default=500)
    parser.add_argument("--test_env", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="train.py processes at once")
    parser.add_argument("--csv", help="also write every row (run, checkpoint) to this CSV")
    args = parser.parse_args()
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="mask_lr_regimes_") as root:
        folders = run_all(args, Path(root))
        rows = [
            row
            for (lr, seed), folder in folders.items()
            for row in checkpoint_rows(lr, seed, folder, args.test_env)
        ]
    runs = len(args.mask_lr) * len(args.seeds)
    print(
        f"DMG on {DATASET}, test domain env {args.test_env}, {args.steps} steps, DomainBed's "
        f"train.py with default hparams but mask_lr; mean over seeds {args.seeds} "
        f"({runs} runs, {time.time() - started:.0f} s); undecided: mask probabilities in "
        f"({UNDECIDED[0]}, {UNDECIDED[1]})\n"
    )
    print(table(rows))
    if args.csv:
        with open(args.csv, "w", newline="") as stream:
            writer = csv.DictWriter(stream, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
