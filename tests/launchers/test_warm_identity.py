"""A DomainBed job forked warm writes the same results as the same job run as a new process:
results.jsonl record by record, every field except timings and memory, on the embedded
RotatedDigits, for DomainBed's own ERM and for DMG, this package's masks on top of its Aggregate
(the per-domain heads that MultiHead also has). What a warm job could get wrong is the state of
the process it is forked from (imports, random generators, threads, folder, environment), which
does not depend on the algorithm; each job run as a new process costs that process's start-up
(some 10 s of CPU), so the comparison keeps to one algorithm of DomainBed and one of this
package."""

import json
import os

import pytest

from dmg_domainbed.launchers.local_parallel import Plan, run_commands

from ..helpers import domainbed_env

ALGORITHMS = ("ERM", "DMG")
STEPS, CHECKPOINT_FREQ = 7, 2
NOT_COMPARED = {"step_time", "mem_gb"}  # timings and memory


def sweep_commands(sweep_dir, data_dir) -> list[str]:
    """One job per algorithm, written by DomainBed's own sweep (random hparams seed 1)."""
    from domainbed.lib import misc
    from domainbed.scripts.sweep import Job

    commands = []
    for algorithm in ALGORITHMS:
        train_args = {
            "dataset": "RotatedDigits",
            "algorithm": algorithm,
            "test_envs": [1],
            "holdout_fraction": 0.2,
            "hparams_seed": 1,
            "data_dir": str(data_dir),
            "task": "domain_generalization",
            "trial_seed": 0,
            "seed": misc.seed_hash("RotatedDigits", algorithm, [1], 1, 0),
            "steps": STEPS,
            "checkpoint_freq": CHECKPOINT_FREQ,
        }
        commands.append(Job(train_args, str(sweep_dir)).command_str)
    return commands


def comparable_records(job_dir) -> list[dict]:
    records = []
    for line in (job_dir / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        for name in NOT_COMPARED:
            record.pop(name)
        record["args"].pop("output_dir")
        records.append(record)
    return records


@pytest.fixture
def python_on_path(monkeypatch):
    monkeypatch.setenv("PATH", domainbed_env()["PATH"])


@pytest.mark.slow  # jobs that train as new processes
def test_warm_jobs_write_the_same_results_as_new_processes(tmp_path, python_on_path):
    runs = {}
    for warm in (False, True):
        sweep_dir = tmp_path / ("warm" if warm else "fresh")
        plan = Plan(jobs=2, gpus=(), threads=1, loader_workers=1, warm=warm)
        commands = sweep_commands(sweep_dir, data_dir=tmp_path / "data")
        outcomes = run_commands(commands, plan, say=lambda line: None)
        assert [outcome.returncode for outcome in outcomes] == [0] * len(ALGORITHMS)
        assert [outcome.warm for outcome in outcomes] == [warm] * len(ALGORITHMS)
        runs[warm] = {
            outcome.log.parent.name: outcome.log.parent for outcome in outcomes if outcome.log
        }
    assert runs[True].keys() == runs[False].keys() and len(runs[True]) == len(ALGORITHMS)
    for job, fresh_dir in runs[False].items():
        fresh, warm = comparable_records(fresh_dir), comparable_records(runs[True][job])
        algorithm = fresh[0]["args"]["algorithm"]
        assert [r["step"] for r in fresh] == [0, 2, 4, 6], algorithm
        assert warm == fresh, algorithm
        assert os.path.exists(runs[True][job] / "done") and os.path.exists(fresh_dir / "done")
