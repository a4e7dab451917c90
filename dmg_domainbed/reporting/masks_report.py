"""``masks``: a DMG run's mask probabilities and IoU between domains, as CSV and a picture."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from dmg_domainbed.reporting import mask_maps, models
from dmg_domainbed.reporting.in_domain import source_envs
from dmg_domainbed.reporting.runs import Run, require_algorithm, require_model
from dmg_domainbed.reporting.style import save


@dataclass
class MasksReport:
    """Per-layer summary (IoU, active fractions) and the files written."""

    summary: pd.DataFrame
    files: list[Path]


def environment_names(run: Run) -> list[str]:
    from domainbed import datasets

    return list(datasets.get_dataset_class(run.dataset).ENVIRONMENTS)


def domain_names(run: Run) -> list[str]:
    """``d<i> = <environment>`` for each source domain of the run."""
    environments = environment_names(run)
    return [
        f"d{d} = {environments[env]}"
        for d, env in enumerate(source_envs(len(environments), run.test_envs))
    ]


def write_masks_report(run: Run, output_dir: Path, stem: str = "masks") -> MasksReport:
    """``<stem>.png``, ``<stem>_probabilities.csv`` and ``<stem>_iou.csv`` for a DMG run."""
    require_algorithm(run, ("DMG",), "masks")
    require_model(run)
    layers = mask_maps.layer_masks(models.load_algorithm(run, "cpu"))
    domains = domain_names(run)
    output_dir.mkdir(parents=True, exist_ok=True)
    files = [output_dir / f"{stem}_probabilities.csv", output_dir / f"{stem}_iou.csv"]
    mask_maps.probabilities_frame(layers, domains).to_csv(files[0], index=False)
    mask_maps.iou_frame(layers, domains).to_csv(files[1], index=False)
    held_out = ", ".join(environment_names(run)[e] for e in run.test_envs)
    title = (
        f"DMG masks on {run.dataset}, test domain {held_out} "
        f"(hparams {run.args['hparams_seed']}, trial {run.args['trial_seed']}, "
        f"step {run.records[-1]['step']})"
    )
    files.append(save(mask_maps.masks_figure(layers, domains, title), output_dir / f"{stem}.png"))
    return MasksReport(summary=mask_maps.summary_frame(layers, domains), files=files)
