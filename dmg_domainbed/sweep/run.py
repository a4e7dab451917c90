"""Running a planned sweep through DomainBed's own sweep script, after checking it can run.

Launcher settings from the sweep file become the launcher's environment variables for the
DomainBed sweep process; a variable already set in the environment wins. Everything that can be
checked before DomainBed creates job folders is checked first: DomainBed's ``Job.launch``
creates every job folder before it calls the launcher.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dmg_domainbed.errors import UserError
from dmg_domainbed.preflight import data
from dmg_domainbed.sweep import plan
from dmg_domainbed.sweep.config import SweepConfig, launcher_options


def _as_text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def launcher_environment(
    config: SweepConfig, launcher: str, environ: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """The environment of DomainBed's sweep process, and notes on variables that win over
    the file."""
    env = dict(environ)
    notes = []
    if launcher != config.launcher:
        if config.launcher_options:
            notes.append(f"the file's [launcher] settings are for {config.launcher}: not used")
        return env, notes
    for option in launcher_options(launcher):
        if option.name not in config.launcher_options:
            continue
        file_value = _as_text(config.launcher_options[option.name])
        if env.get(option.env, "").strip():
            notes.append(
                f"{option.env}={env[option.env]} from the environment wins over "
                f"{option.name} = {file_value} in the file"
            )
        else:
            env[option.env] = file_value
    return env, notes


def weight_notes(sweep: plan.Sweep) -> list[str]:
    """Pretrained weights the jobs will download because they are not in the cache."""
    from domainbed import algorithms

    from dmg_domainbed.preflight.doctor import dataset_input_shape
    from dmg_domainbed.preflight.hparams import effective_hparams
    from dmg_domainbed.preflight.weights import algorithm_weights, needed_weights

    missing: dict[str, str] = {}
    notes = []
    for algorithm in sweep.config.algorithms:
        algorithm_class = algorithms.get_algorithm_class(algorithm)
        for dataset in sweep.config.datasets:
            hparams = effective_hparams(algorithm, dataset, sweep.config.hparams_of(algorithm))
            own = algorithm_weights(algorithm_class, hparams)
            if own is not None:  # the algorithm's own weights, the same on every dataset
                if not own.ready:
                    notes.append(f"{algorithm}'s pretrained weights: {'; '.join(own.details)}")
                break
            files, _ = needed_weights(hparams, dataset_input_shape(dataset))
            for f in files:
                if not f.present:
                    missing.setdefault(f.filename, f"{f.filename} in {f.folder}")
    if missing:
        notes.append(
            "pretrained weights not in the cache, each job downloads them when it builds its "
            f"model (jobs without internet fail): {'; '.join(missing.values())}. "
            "`dmg-domainbed doctor --dataset NAME --hparams JSON` says how to get them."
        )
    return notes


def check_ready(sweep: plan.Sweep, launcher: str, env: Mapping[str, str]) -> str:
    """Raise :class:`UserError` if the jobs could not start; describe the launcher's plan."""
    from domainbed import command_launchers, datasets

    if shutil.which("python", path=env.get("PATH")) is None:
        raise UserError(
            "no `python` on PATH: DomainBed's sweep starts every job as "
            "`python -m domainbed.scripts.train`. Activate the environment that has DomainBed "
            "and this package, or put its python first on PATH."
        )
    missing = []
    for name in sweep.config.datasets:
        cls = datasets.get_dataset_class(name)
        found = data.dataset_status(name, cls.__module__, len(cls.ENVIRONMENTS), sweep.data_dir)
        if not found.ok:
            missing.append(f"{name}: {found.detail}")
    if missing:
        raise UserError(
            "data not found under --data_dir, every job would fail:\n  "
            + "\n  ".join(missing)
            + "\nGet the datasets with DomainBed's python -m domainbed.scripts.download, or pass "
            "--data_dir with the folder that holds them."
        )
    check = getattr(command_launchers.REGISTRY[launcher], "check", None)
    if check is None:
        return launcher
    try:
        return f"{launcher}: {check(env)}"
    except UserError as error:
        raise UserError(f"launcher {launcher}: {error}") from None


def execute(
    sweep: plan.Sweep,
    groups: Sequence[tuple[plan.Group, Sequence[Any]]],
    launcher: str,
    env: Mapping[str, str],
    delete_incomplete: bool,
    say: Callable[[str], None] = print,
) -> int:
    """Run DomainBed's sweep script for each group; the first non-zero exit status stops."""
    from domainbed.scripts.sweep import Job

    for group, group_jobs in groups:
        counts = plan.state_counts(group_jobs)
        actions = []
        if delete_incomplete and counts[Job.INCOMPLETE]:
            actions.append("delete_incomplete")
        if counts[Job.NOT_LAUNCHED] or actions:
            actions.append("launch")
        for action in actions:
            args = plan.domainbed_sweep_args(sweep, group, action, launcher)
            say(f"$ {plan.shell_line('python', args)}")
            code = subprocess.call([sys.executable, *args], env=dict(env))
            if code != 0:
                say(f"DomainBed's sweep {action} exited with status {code}")
                return code
    return 0
