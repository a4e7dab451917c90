"""The demo's sweep: which DomainBed jobs it has, where they live, how it is launched."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path

from dmg_domainbed.reporting.runs import DONE_FILE
from dmg_domainbed.sweep import plan as sweep_plan
from dmg_domainbed.sweep.config import SweepConfig

DATASET = "RotatedDigits"
ALGORITHMS = ("ERM", "Aggregate", "MultiHead", "DMG")
# RotatedDigits ships inside scikit-learn and reads no folder, but DomainBed's sweep requires
# --data_dir. A fixed value keeps the job hashes (and so resuming) independent of the folder.
DATA_DIR = "."
PARALLEL_LAUNCHER = "local_parallel"


@dataclass(frozen=True)
class Job:
    """One train.py run of the sweep: its folder and a short description."""

    output_dir: Path
    algorithm: str
    test_env: int
    test_domain: str
    domainbed_job: object = field(default=None, compare=False, repr=False)

    @property
    def done(self) -> bool:
        return (self.output_dir / DONE_FILE).exists()

    def describe(self) -> str:
        return f"{self.algorithm}, test domain {self.test_domain}"


@dataclass(frozen=True)
class DemoPlan:
    """The sweep of ``algorithms`` over every test domain of RotatedDigits (1 hparam, 1 trial)."""

    output_dir: Path
    algorithms: tuple[str, ...] = ALGORITHMS
    steps: int | None = None
    launcher: str = field(default_factory=lambda: default_launcher())

    @property
    def sweep_dir(self) -> Path:
        return self.output_dir / "sweep"

    @property
    def report_dir(self) -> Path:
        return self.output_dir / "report"

    @property
    def log_path(self) -> Path:
        return self.output_dir / "sweep.log"

    def total_steps(self) -> int:
        from domainbed import datasets

        return self.steps or datasets.get_dataset_class(DATASET).N_STEPS

    def algorithm_hparams(self) -> dict[str, dict[str, int]]:
        """Fixed hparams of some algorithms' jobs: ImportanceMask's phase schedule, whose
        defaults are sized for DomainBed's 5,000 steps, scaled to the demo's steps."""
        if "ImportanceMask" not in self.algorithms:
            return {}
        from dmg_domainbed.algorithms.importance_mask import schedule_hparams

        return {"ImportanceMask": schedule_hparams(self.total_steps())}

    def sweep(self) -> sweep_plan.Sweep:
        """The demo as a sweep of :mod:`dmg_domainbed.sweep`: algorithms with their own fixed
        hparams get a ``sweep launch`` of their own (DomainBed takes one ``--hparams`` per
        launch), into the same folder."""
        config = SweepConfig(
            path=Path("dmg-domainbed demo"),
            algorithms=self.algorithms,
            datasets=(DATASET,),
            n_hparams=1,
            n_trials=1,
            steps=self.steps,
            single_test_envs=True,
            algorithm_hparams=self.algorithm_hparams(),
        )
        return sweep_plan.Sweep(config, data_dir=DATA_DIR, output_dir=str(self.sweep_dir))

    def launch_commands(self) -> list[list[str]]:
        """``python -m domainbed.scripts.sweep launch ...``, one per group of algorithms."""
        sweep = self.sweep()
        return [
            [
                sys.executable,
                *sweep_plan.domainbed_sweep_args(sweep, group, "launch", self.launcher),
            ]
            for group in sweep.groups
        ]

    def jobs(self) -> list[Job]:
        """The sweep's jobs, as DomainBed's sweep script computes them (same folders)."""
        from domainbed import datasets

        environments = datasets.get_dataset_class(DATASET).ENVIRONMENTS
        sweep = self.sweep()
        jobs = []
        for group in sweep.groups:
            for job in sweep_plan.jobs(sweep, group):
                args = job.train_args
                test_env = args["test_envs"][0]
                jobs.append(
                    Job(
                        Path(job.output_dir),
                        args["algorithm"],
                        test_env,
                        environments[test_env],
                        job,
                    )
                )
        return jobs


def default_launcher() -> str:
    """``local_parallel`` (several jobs at once) when installed, else DomainBed's ``local``."""
    module = "dmg_domainbed.launchers.local_parallel"
    return PARALLEL_LAUNCHER if importlib.util.find_spec(module) is not None else "local"
