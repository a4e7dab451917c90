"""Drawing without a display (``Figure`` objects on the Agg canvas, never pyplot): blank
figures, a stable palette, PNG files; and the plain data an algorithm's pictures of a finished
run are drawn from. It imports nothing of the package, so the algorithms and the reports share it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib
from matplotlib.figure import Figure

if TYPE_CHECKING:
    import pandas as pd
    import torch

DPI = 110


def figure(width: float, height: float) -> Figure:
    """A blank figure of ``width`` x ``height`` inches with a tight, readable layout."""
    return Figure(figsize=(width, height), layout="constrained")


def colours(names: list[str]) -> dict[str, tuple]:
    """A stable, distinguishable colour for each name, in the given order."""
    palette = matplotlib.colormaps["tab10"]
    return {name: palette(i % 10) for i, name in enumerate(names)}


def save(fig: Figure, path: Path) -> Path:
    """Write ``fig`` as a PNG (with the Agg canvas: no display, no global state)."""
    fig.savefig(path, dpi=DPI)
    return path


@dataclass(frozen=True)
class Sample:
    """Held-out images of one environment of a run: the first images of train.py's
    ``env<i>_out`` split, without training augmentation, as the dataset gives them."""

    environment: str
    role: str  # "source" or "test"
    images: torch.Tensor  # [N, C, H, W]


@dataclass(frozen=True)
class FinishedRun:
    """What an algorithm draws a finished run from, besides its trained state: ``folder`` (for
    messages), ``title`` (dataset, test domain, seeds, step), ``source_domains`` (the name of
    ``update``'s domain ``d``) and, where it asks (``SAMPLE_IMAGES``), held-out ``samples``."""

    folder: str
    title: str
    source_domains: tuple[str, ...]
    samples: tuple[Sample, ...] = ()


@dataclass
class Drawn:
    """What an algorithm drew of a finished run: a summary table and the files written."""

    summary: pd.DataFrame
    files: list[Path]
