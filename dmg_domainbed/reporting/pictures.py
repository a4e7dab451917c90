"""The sweep's accuracy picture, drawn with :mod:`dmg_domainbed.drawing` as every picture is."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from dmg_domainbed.drawing import colours, figure

NAMED_BARS = 6  # flagged bars named under the panels; more are counted


def accuracy_figure(results: pd.DataFrame, dataset: str) -> Figure:
    """Grouped bars: test accuracy per test domain (and their average) for each algorithm.

    One panel per model-selection method that has results (leave-one-domain-out needs runs
    holding out two domains); error bars are the standard error over trial seeds
    (zero with a single trial). ``results`` comes from :func:`.tables.results_frame`; where it
    carries the flags of :mod:`.cell_flags`, a note under the panels names the partial and the
    diverged bars.
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
    notes = _flag_notes(frame[frame["selection_method"].isin(methods)])
    if empty and len(empty) < len(has_result):
        notes.insert(0, f"no result (X in the tables) for: {'; '.join(empty)}")
    if notes:
        fig.supxlabel("\n".join(notes), fontsize=8, color="dimgray")
    return fig


def _flag_notes(frame: pd.DataFrame) -> list[str]:
    """What the flags of :mod:`.cell_flags` say about the bars, one line each."""
    if "partial" not in frame:
        return []
    notes = []
    for flag, rows in (("partial", frame["partial"]), ("diverged", frame["diverged_runs"] > 0)):
        cells = frame[rows & (frame["test_env"] != "Avg")]
        named = sorted({f"{a} ({d})" for a, d in zip(cells["algorithm"], cells["test_domain"])})
        if len(named) > NAMED_BARS:
            named = [f"{len(named)} bars (see the tables)"]
        if named:
            notes.append(f"{flag}: {', '.join(named)}")
    return notes


def _domain_label(domain) -> str:
    return "average" if domain == "Avg" else str(domain)
