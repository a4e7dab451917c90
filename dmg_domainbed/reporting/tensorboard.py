"""A sweep as TensorBoard logs: one run per run folder with every number train.py logged, its
hparams through the HParams plugin, and per selection method ``selected_test_acc/<method>``
(the test accuracy at the checkpoint it picks) and ``selected/<method>`` (1 for the run it
selects); docs/reports.md says more.
"""

from __future__ import annotations

import importlib.util
import json
import numbers
from pathlib import Path

import pandas as pd

from dmg_domainbed.errors import UserError
from dmg_domainbed.folders import check_creatable, check_outside, path_part
from dmg_domainbed.reporting.jobs import SweepJobs

OPTION = "--tensorboard"
METHOD_TAGS = {
    "training-domain validation set": "training_domain_validation",
    "leave-one-domain-out cross-validation": "leave_one_domain_out",
    "test-domain validation set (oracle)": "test_domain_oracle",
}
RUN_KEYS = ("algorithm", "dataset", "test_envs", "hparams_seed", "trial_seed")


def check_log_dir(log_dir: Path, *sweeps: Path) -> Path:
    """``log_dir``, if TensorBoard is installed and it is new or empty and outside the sweeps."""
    if importlib.util.find_spec("tensorboard") is None:
        raise UserError(
            f"{OPTION} writes TensorBoard logs, but TensorBoard is not installed. Install it "
            "with: pip install 'dmg-domainbed[tensorboard]'"
        )
    check_creatable(log_dir, OPTION)
    check_outside(log_dir, sweeps, f"{OPTION} folder", "sweep", f"a {OPTION} folder")
    if log_dir.is_dir() and any(log_dir.iterdir()):
        raise UserError(
            f"{OPTION} folder '{log_dir}' is not empty; writing into it would mix two "
            "exports of runs in TensorBoard. Give a new or empty folder, or delete it."
        )
    return log_dir


def export(jobs: SweepJobs, ranked: pd.DataFrame, log_dir: Path) -> list[str]:
    """The runs of ``jobs`` written into ``log_dir``; their TensorBoard names."""
    from tensorboard.plugins.hparams import summary_v2 as hp
    from torch.utils.tensorboard import SummaryWriter

    by_run = {Path(run): rows for run, rows in ranked.groupby("run", sort=False)}
    runs = sorted((job.folder, job.records) for job in jobs.jobs if job.records)  # folders differ
    log_dir.mkdir(parents=True, exist_ok=True)
    names = []
    for folder, records in runs:
        # the run's name, each part escaped (:func:`.folders.path_part`)
        args, envs = records[-1]["args"], [str(env) for env in records[-1]["args"]["test_envs"]]
        seeds = f"hparams{args['hparams_seed']}_trial{args['trial_seed']}_{folder.name}"
        parts = (args["algorithm"], args["dataset"], f"test_env{'_'.join(envs)}", seeds)
        names.append(name := "/".join(map(path_part, parts)))
        with SummaryWriter(log_dir=str(log_dir / name)) as writer:
            # its hparams and identity as the HParams plugin takes them; lists, None as JSON
            values = {**{key: args[key] for key in RUN_KEYS}, "test_envs": ",".join(envs)}
            values = {
                key: value if isinstance(value, (bool, numbers.Real, str)) else json.dumps(value)
                for key, value in {**values, **records[-1]["hparams"]}.items()
            }
            writer.file_writer.add_summary(hp.hparams_pb(values, trial_id=name))
            for record in records:
                for key, value in record.items():
                    if key != "step" and type(value) in (int, float):  # JSON numbers, not bools
                        writer.add_scalar(key, value, record["step"])
            for _, row in by_run.get(folder.absolute(), pd.DataFrame()).iterrows():
                tag = METHOD_TAGS[row["selection_method"]]
                writer.add_scalar(f"selected_test_acc/{tag}", row["accuracy"] / 100, row["step"])
                writer.add_scalar(f"selected/{tag}", float(row["rank"] == 0), records[-1]["step"])
    return names
