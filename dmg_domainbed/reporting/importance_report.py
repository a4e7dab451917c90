"""``masks`` for ImportanceMask runs: each tracked weight's importance and the important mask."""

from __future__ import annotations

from pathlib import Path

from dmg_domainbed.errors import UserError
from dmg_domainbed.reporting import importance_maps, models
from dmg_domainbed.reporting.masks_report import MasksReport, environment_names
from dmg_domainbed.reporting.runs import Run, require_algorithm, require_model
from dmg_domainbed.reporting.style import save


def write_importance_report(run: Run, output_dir: Path, stem: str = "masks") -> MasksReport:
    """``<stem>.png`` and ``<stem>_importance.csv`` for an ImportanceMask run past phase 1."""
    require_algorithm(run, ("ImportanceMask",), "masks")
    require_model(run)
    algorithm = models.load_algorithm(run, "cpu")
    if algorithm.in_phase1:
        raise UserError(
            f"'{run.path}' is an ImportanceMask run that ended in phase 1 (step "
            f"{run.records[-1]['step']}, phase1_steps {run.hparams['phase1_steps']}): importance "
            "is computed when phase 1 ends. Train for more steps than phase1_steps, or lower it, "
            'e.g. --hparams \'{"phase1_steps": 750, "freeze_step": 1275}\'.'
        )
    maps = {k: v.cpu().numpy() for k, v in algorithm.importance_maps().items()}
    masks = {k: v.cpu().numpy() for k, v in algorithm.importance_masks().items()}
    output_dir.mkdir(parents=True, exist_ok=True)
    table = output_dir / f"{stem}_importance.csv"
    importance_maps.weights_frame(maps, masks).to_csv(table, index=False)
    held_out = ", ".join(environment_names(run)[e] for e in run.test_envs)
    title = (
        f"ImportanceMask on {run.dataset}, test domain {held_out} "
        f"(hparams {run.args['hparams_seed']}, trial {run.args['trial_seed']}, "
        f"step {run.records[-1]['step']})"
    )
    picture = save(
        importance_maps.importance_figure(maps, masks, title), output_dir / f"{stem}.png"
    )
    return MasksReport(summary=importance_maps.summary_frame(maps, masks), files=[table, picture])
