"""Pictures of what DMG learned: its masks, and its diagnostics over training.

For every masked layer, ``m_d = sigmoid(m~_d)`` of each source domain ``d`` (paper Sec. 2.1)
and the pairwise IoU between domains: soft (``m_i.m_j / sum(m_i + m_j - m_i m_j)``, the
quantity the overlap loss of Eq. 2 penalises) and hard (the same on ``m > 0.5``, the masks that
DMG-KnownDomain uses).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure

from dmg_domainbed.algorithms.dmg import masks
from dmg_domainbed.drawing import Drawn, FinishedRun, figure, save


def draw_masks(algorithm, run: FinishedRun, output_dir: Path, stem: str) -> Drawn:
    """``<stem>.png``, ``<stem>_probabilities.csv`` and ``<stem>_iou.csv`` of a DMG run."""
    layers = layer_masks(algorithm)
    domains = list(run.source_domains)
    output_dir.mkdir(parents=True, exist_ok=True)
    files = [output_dir / f"{stem}_probabilities.csv", output_dir / f"{stem}_iou.csv"]
    probabilities_frame(layers, domains).to_csv(files[0], index=False)
    iou_frame(layers, domains).to_csv(files[1], index=False)
    title = f"DMG masks on {run.title}"
    files.append(save(masks_figure(layers, domains, title), output_dir / f"{stem}.png"))
    return Drawn(summary=summary_frame(layers, domains), files=files)


@dataclass(frozen=True)
class LayerMasks:
    """One masked layer: probabilities ``[D, k]`` and ``[D, D]`` soft and hard IoU."""

    layer: str
    probabilities: np.ndarray
    soft_iou: np.ndarray
    hard_iou: np.ndarray


@torch.no_grad()
def layer_masks(algorithm) -> list[LayerMasks]:
    """Every masked layer of a DMG algorithm, in the order the forward pass reaches them."""
    result = []
    for name, logits in zip(algorithm.masks.layer_names, algorithm.masks.logits, strict=True):
        probs = torch.sigmoid(logits.detach().float().cpu())
        result.append(
            LayerMasks(
                layer=name,
                probabilities=probs.numpy(),
                soft_iou=masks.pairwise_soft_iou(probs).numpy(),
                hard_iou=masks.pairwise_soft_iou(masks.hard_masks(probs)).numpy(),
            )
        )
    return result


def probabilities_frame(layers: list[LayerMasks], domains: list[str]) -> pd.DataFrame:
    """Long table: layer, source domain, unit, mask probability."""
    rows = [
        {"layer": lm.layer, "domain": domains[d], "unit": unit, "probability": float(p)}
        for lm in layers
        for d, row in enumerate(lm.probabilities)
        for unit, p in enumerate(row)
    ]
    return pd.DataFrame(rows)


def iou_frame(layers: list[LayerMasks], domains: list[str]) -> pd.DataFrame:
    """Long table: layer, two source domains, their soft and hard IoU."""
    rows = [
        {
            "layer": lm.layer,
            "domain_a": domains[i],
            "domain_b": domains[j],
            "soft_iou": float(lm.soft_iou[i, j]),
            "hard_iou": float(lm.hard_iou[i, j]),
        }
        for lm in layers
        for i in range(len(domains))
        for j in range(len(domains))
    ]
    return pd.DataFrame(rows)


def summary_frame(layers: list[LayerMasks], domains: list[str]) -> pd.DataFrame:
    """Per layer: units, mean soft and hard IoU over pairs of domains, active fraction per
    domain (``m_d > 0.5``)."""
    rows = []
    for lm in layers:
        row = {
            "layer": lm.layer,
            "units": lm.probabilities.shape[1],
            "mean_soft_iou": float(masks.mean_over_pairs(lm.soft_iou)),
            "mean_hard_iou": float(masks.mean_over_pairs(lm.hard_iou)),
        }
        for d, domain in enumerate(domains):
            row[f"active {domain}"] = float((lm.probabilities[d] > 0.5).mean())
        rows.append(row)
    return pd.DataFrame(rows).set_index("layer")


def unit_order(probabilities: np.ndarray) -> np.ndarray:
    """Units sorted so that shared ones come first, then units active in fewer domains,
    grouped by which domains use them: the domain-specific blocks become visible."""
    active = probabilities > 0.5
    pattern = (active * (2 ** np.arange(len(active)))[:, None]).sum(0)
    return np.lexsort((-probabilities.mean(0), pattern, -active.sum(0)))


def masks_figure(layers: list[LayerMasks], domains: list[str], title: str) -> Figure:
    """One row per layer: mask probabilities per domain (units sorted by :func:`unit_order`)
    and the hard IoU matrix between domains."""
    fig = figure(12, 1.0 + 0.45 * len(domains) * len(layers) + 0.6 * len(layers))
    grid = fig.add_gridspec(len(layers), 2, width_ratios=[4, 1])
    for row, lm in enumerate(layers):
        heat = fig.add_subplot(grid[row, 0])
        image = heat.imshow(
            lm.probabilities[:, unit_order(lm.probabilities)],
            aspect="auto",
            cmap="viridis",
            vmin=0,
            vmax=1,
            interpolation="nearest",
        )
        heat.set_yticks(range(len(domains)), domains, fontsize=8)
        heat.set_title(
            f"{lm.layer}: mask probability m_d of its {lm.probabilities.shape[1]} "
            "input units (sorted: shared first, then by domain pattern)",
            fontsize=9,
        )
        fig.colorbar(image, ax=heat, fraction=0.03, pad=0.01)
        matrix = fig.add_subplot(grid[row, 1])
        matrix.imshow(lm.hard_iou, cmap="magma", vmin=0, vmax=1)
        for (i, j), value in np.ndenumerate(lm.hard_iou):
            colour = "black" if value > 0.6 else "white"
            matrix.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8, color=colour)
        matrix.set_xticks(range(len(domains)), domains, fontsize=7, rotation=45)
        matrix.set_yticks(range(len(domains)), domains, fontsize=7)
        matrix.set_title("hard IoU (m > 0.5)", fontsize=9)
    heat.set_xlabel("unit")
    fig.suptitle(title, fontsize=10)
    return fig


def training_curves(
    runs: list[list[dict]], environments: list[str], iou_key: str, active_key: str
) -> Figure:
    """Per DMG run (one row per test-domain choice): the overlap loss, the mean hard IoU
    between source-domain masks per masked layer, and the fraction of active units
    (``m_d > 0.5``) per source domain, against the training step (paper Sec. 2, Eq. 2).

    ``runs`` are the records train.py logged; ``iou_key + layer`` and ``active_key + d`` are
    the keys ``update`` logs those diagnostics under."""
    fig = figure(13, 2.5 * len(runs) + 0.5)
    axes = fig.subplots(len(runs), 3, sharex=True, squeeze=False)
    for row, run in zip(axes, runs, strict=True):
        args = run[0]["args"]
        steps = [r["step"] for r in run]
        sources = [e for e in range(len(environments)) if e not in args["test_envs"]]
        held_out = ", ".join(environments[e] for e in args["test_envs"])
        row[0].plot(steps, [r.get("overlap", np.nan) for r in run], color="black")
        row[0].set_ylabel(
            f"test domain {held_out}\n(hparams {args['hparams_seed']}, trial {args['trial_seed']})",
            fontsize=9,
        )
        layers = sorted({k[len(iou_key) :] for r in run for k in r if k.startswith(iou_key)})
        for layer in layers:
            row[1].plot(steps, [r.get(iou_key + layer, np.nan) for r in run], label=layer)
        for d, env in enumerate(sources):
            row[2].plot(
                steps,
                [r.get(f"{active_key}{d}", np.nan) for r in run],
                label=f"d{d} = {environments[env]}",
            )
        row[1].set_ylim(-0.02, 1.02)
        row[2].set_ylim(-0.02, 1.02)
        row[1].legend(fontsize=7, loc="lower left")
        row[2].legend(fontsize=7, loc="lower left", title="source domain", title_fontsize=7)
        for axis in row:
            axis.grid(alpha=0.3)
    axes[0, 0].set_title("overlap loss (sum over layers of mean soft IoU)", fontsize=10)
    axes[0, 1].set_title("mean hard IoU between domain masks, per layer", fontsize=10)
    axes[0, 2].set_title("fraction of active units (m > 0.5) per domain", fontsize=10)
    for axis in axes[-1]:
        axis.set_xlabel("training step")
    weights = sorted({run[-1]["hparams"].get("lambda_overlap") for run in runs} - {None})
    fig.supxlabel(overlap_caption(weights), fontsize=8, color="dimgray")
    return fig


def overlap_caption(weights: list[float]) -> str:
    """Why the overlap loss moves as it does (docs/reports.md, "Why DMG's overlap rises"): the
    two gradients on the mask logits of Eq. 3."""
    weight = ", ".join(f"{w:g}" for w in weights) or "?"
    text = (
        "Why the overlap moves: the soft IoU grows with the level of the mask probabilities, "
        f"whichever units the domains keep. The penalty (lambda_overlap = {weight}) lowers every "
        "mask probability; the cross-entropy raises those of the units the network relies on, "
        "since in training a unit with m < 1 is dropped at random. While the network is "
        "untrained the cross-entropy barely pushes and the overlap falls; once it learns, its "
        "push is the larger, the probabilities rise and the overlap with them, until the two "
        "balance. A rising overlap alone does not mean that the domains use the same units."
    )
    return textwrap.fill(text, 190)
