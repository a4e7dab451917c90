"""Pictures of what ImportanceMask learned: each tracked weight's importance and whether it is
important.

``maps`` and ``masks`` are ``{parameter name: array shaped like the parameter}``: importance in
[0, 1] and the boolean important mask, as ``importance_maps()`` / ``importance_masks()`` give them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from dmg_domainbed.drawing import Drawn, FinishedRun, figure, save
from dmg_domainbed.errors import UserError


def draw_importance(algorithm, run: FinishedRun, output_dir: Path, stem: str) -> Drawn:
    """``<stem>.png`` and ``<stem>_importance.csv`` of an ImportanceMask run past phase 1."""
    if algorithm.in_phase1:
        raise UserError(
            f"'{run.folder}' is an ImportanceMask run that ended in phase 1 (after "
            f"{int(algorithm.update_count)} steps, phase1_steps "
            f"{algorithm.hparams['phase1_steps']}): importance is computed when phase 1 ends. "
            "Train for more steps than phase1_steps, or lower it, "
            """e.g. --hparams '{"phase1_steps": 750, "freeze_step": 1275}'."""
        )
    maps = {k: v.cpu().numpy() for k, v in algorithm.importance_maps().items()}
    masks = {k: v.cpu().numpy() for k, v in algorithm.importance_masks().items()}
    output_dir.mkdir(parents=True, exist_ok=True)
    table = output_dir / f"{stem}_importance.csv"
    weights_frame(maps, masks).to_csv(table, index=False)
    title = f"ImportanceMask on {run.title}"
    picture = save(importance_figure(maps, masks, title), output_dir / f"{stem}.png")
    return Drawn(summary=summary_frame(maps, masks), files=[table, picture])


MATRIX_HEIGHT = 2.0  # inches of a weight matrix's heatmap
STRIP_HEIGHT = 0.45  # inches of a one-row heatmap (a bias)


def as_matrix(values: np.ndarray) -> np.ndarray:
    """A parameter as rows of output units: ``[out, in * k * k]``; a bias is one row."""
    return values.reshape(1, -1) if values.ndim < 2 else values.reshape(values.shape[0], -1)


def column_label(shape: tuple[int, ...]) -> str:
    """What a column of :func:`as_matrix` is, for a parameter of ``shape``."""
    if len(shape) < 2:
        return "unit"
    return "input" if len(shape) == 2 else "input x kernel position"


def summary_frame(maps: dict[str, np.ndarray], masks: dict[str, np.ndarray]) -> pd.DataFrame:
    """Per parameter: shape, number of weights, fraction important, mean importance."""
    return pd.DataFrame(
        [
            {
                "parameter": name,
                "shape": "x".join(map(str, maps[name].shape)),
                "weights": maps[name].size,
                "important": masks[name].mean(),
                "mean importance": maps[name].mean(),
            }
            for name in maps
        ]
    ).set_index("parameter")


def weights_frame(maps: dict[str, np.ndarray], masks: dict[str, np.ndarray]) -> pd.DataFrame:
    """One row per weight: parameter, flat index, importance, important."""
    return pd.concat(
        [
            pd.DataFrame(
                {
                    "parameter": name,
                    "index": np.arange(maps[name].size),
                    "importance": maps[name].reshape(-1),
                    "important": masks[name].reshape(-1),
                }
            )
            for name in maps
        ],
        ignore_index=True,
    )


def importance_figure(
    maps: dict[str, np.ndarray], masks: dict[str, np.ndarray], title: str
) -> Figure:
    """Per tracked parameter, one row: its importance heatmap beside its important mask."""
    heights = [MATRIX_HEIGHT if maps[name].ndim > 1 else STRIP_HEIGHT for name in maps]
    fig = figure(11, 0.7 + sum(h + 0.6 for h in heights))
    grid = fig.add_gridspec(len(maps), 2, height_ratios=heights)
    for row, name in enumerate(maps):
        importance, important = as_matrix(maps[name]), as_matrix(masks[name])
        shape = "x".join(map(str, maps[name].shape))
        left, right = fig.add_subplot(grid[row, 0]), fig.add_subplot(grid[row, 1])
        image = left.imshow(
            importance, aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="nearest"
        )
        # the same colour bar width on every row: its length/width ratio follows the row height
        fig.colorbar(
            image, ax=left, fraction=0.03, pad=0.01, aspect=20 * heights[row] / MATRIX_HEIGHT
        )
        left.set_title(f"{name} ({shape}): importance", fontsize=9)
        right.imshow(important, aspect="auto", cmap="gray", vmin=0, vmax=1, interpolation="nearest")
        right.set_title(f"{name}: important (white) {important.mean():.0%}", fontsize=9)
        for axes in (left, right):
            axes.set_xlabel(column_label(maps[name].shape), fontsize=8)
            if importance.shape[0] > 1:
                axes.set_ylabel("output unit", fontsize=8)
            else:
                axes.set_yticks([])
    fig.suptitle(
        f"{title}\nimportance: sum over source domains of |w_final - w_init| after "
        "phase 1, normalised to [0, 1] over all tracked weights",
        fontsize=10,
    )
    return fig
