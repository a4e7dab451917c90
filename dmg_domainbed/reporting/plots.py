"""Report pictures: test accuracy by algorithm, and DMG's mask diagnostics over training."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from dmg_domainbed.reporting.style import colours, figure

IOU_PREFIX = "mask_iou/"
ACTIVE_PREFIX = "mask_active/d"


def accuracy_figure(results: pd.DataFrame, dataset: str) -> Figure:
    """Grouped bars: test accuracy per test domain (and their average) for each algorithm.

    One panel per model-selection method that has results (leave-one-domain-out needs runs
    holding out two domains); error bars are the standard error over trial seeds
    (zero with a single trial). ``results`` comes from :func:`.tables.results_frame`.
    """
    frame = results[results["dataset"] == dataset]
    has_result = frame.groupby("selection_method", sort=False)["accuracy"].apply(
        lambda values: values.notna().any()
    )
    methods = [method for method, present in has_result.items() if present]
    empty = [method for method, present in has_result.items() if not present]
    if not methods:
        methods = list(has_result.index)
    algorithms = list(frame["algorithm"].unique())
    domains = list(frame["test_domain"].unique())
    palette = colours(algorithms)
    width = 0.8 / len(algorithms)
    fig = figure(max(6.5, 0.32 * len(algorithms) * len(domains) + 2.5), 2.6 * len(methods) + 0.6)
    axes = fig.subplots(len(methods), 1, sharex=True, squeeze=False)[:, 0]
    positions = np.arange(len(domains))
    for axis, method in zip(axes, methods, strict=True):
        panel = frame[frame["selection_method"] == method]
        for k, algorithm in enumerate(algorithms):
            rows = panel[panel["algorithm"] == algorithm].set_index("test_domain").loc[domains]
            heights = rows["accuracy"].astype(float).to_numpy()
            errors = np.nan_to_num(rows["stderr"].astype(float).to_numpy())
            x = positions + (k - (len(algorithms) - 1) / 2) * width
            bars = axis.bar(
                x,
                heights,
                width,
                yerr=errors,
                capsize=2,
                label=algorithm,
                color=palette[algorithm],
                error_kw={"elinewidth": 0.8},
            )
            labels = ["" if np.isnan(h) else f"{h:.0f}" for h in heights]
            axis.bar_label(bars, labels=labels, fontsize=7, padding=1)
        axis.set_title(f"model selection: {method}", fontsize=10)
        axis.set_ylabel("test accuracy (%)")
        axis.set_ylim(0, 105)
        axis.grid(axis="y", alpha=0.3)
        axis.set_axisbelow(True)
    axes[-1].set_xticks(positions, [_domain_label(d) for d in domains])
    axes[-1].set_xlabel(f"{dataset}: test domain (held out during training)")
    axes[0].legend(
        ncols=min(len(algorithms), 6),
        loc="lower left",
        bbox_to_anchor=(0, 1.12),
        frameon=False,
        fontsize=9,
    )
    if empty and len(empty) < len(has_result):
        fig.supxlabel(
            f"no result (X in the tables) for: {'; '.join(empty)}", fontsize=8, color="dimgray"
        )
    return fig


def _domain_label(domain) -> str:
    return "average" if domain == "Avg" else str(domain)


def diagnostic_runs(records, dataset: str) -> list[list[dict]]:
    """DMG's runs on ``dataset``: for each set of test environments, the records (by step) of
    the run with the lowest (hparams_seed, trial_seed), i.e. default hparams when present."""
    runs: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        args = record["args"]
        if args["algorithm"] == "DMG" and args["dataset"] == dataset:
            runs[args["output_dir"]].append(record)
    chosen: dict[tuple, list[dict]] = {}
    for run in runs.values():
        args = run[0]["args"]
        key = tuple(args["test_envs"])
        rank = (args["hparams_seed"], args["trial_seed"])
        if key not in chosen or rank < _rank(chosen[key]):
            chosen[key] = run
    return [sorted(chosen[key], key=lambda r: r["step"]) for key in sorted(chosen)]


def _rank(run: list[dict]) -> tuple[int, int]:
    return run[0]["args"]["hparams_seed"], run[0]["args"]["trial_seed"]


def dmg_diagnostics_figure(runs: list[list[dict]], environments: list[str]) -> Figure:
    """Per DMG run (one row per test-domain choice): the overlap loss, the mean hard IoU
    between source-domain masks per masked layer, and the fraction of active units
    (``m_d > 0.5``) per source domain, against the training step (paper Sec. 2, Eq. 2)."""
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
        layers = sorted({k[len(IOU_PREFIX) :] for r in run for k in r if k.startswith(IOU_PREFIX)})
        for layer in layers:
            row[1].plot(steps, [r.get(IOU_PREFIX + layer, np.nan) for r in run], label=layer)
        for d, env in enumerate(sources):
            row[2].plot(
                steps,
                [r.get(f"{ACTIVE_PREFIX}{d}", np.nan) for r in run],
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
    return fig
