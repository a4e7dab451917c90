"""A sweep on a real Slurm cluster: submitted by ``dmg-domainbed sweep`` as one array in squeue,
cancelled with scancel, resumed through DomainBed's own sweep script (``delete_incomplete``, then
``launch --command_launcher submitit``); DomainBed's results, done files and collect_results; a
rerun through either that submits nothing. DomainBed's scripts run in this process, where
DomainBed is already imported: on 2 cores each fresh import of DomainBed costs seconds."""

from __future__ import annotations

import re

from dmg_domainbed.cli import main

from ..helpers import domainbed_script, erm_sweep_args
from .cluster import array_tasks
from .conftest import wait_until

SWEEP_FILE = """
[sweep]
algorithms = ["ERM"]
datasets = ["RotatedDigits"]
n_hparams = 1
n_trials = 1
steps = 5
single_test_envs = true
data_dir = "{data}"
output_dir = "{output}"

[launcher]
name = "submitit"
cpus = 1
mem_gb = 1
"""


def test_a_sweep_runs_as_one_array_survives_scancel_and_a_rerun_submits_nothing(
    slurm_cluster, use_cluster, tmp_path, capfd
):
    use_cluster(slurm_cluster)
    sweep = tmp_path / "sweep"
    sweep_file = tmp_path / "sweep.toml"
    sweep_file.write_text(SWEEP_FILE.format(data=tmp_path / "data", output=sweep))
    before = set(array_tasks(slurm_cluster))

    def cli(*args: str) -> tuple[int, str, str]:
        """dmg-domainbed in this process; what it and DomainBed's sweep script printed."""
        capfd.readouterr()
        code = main(list(args))
        return (code, *capfd.readouterr())

    code, out, err = cli("sweep", str(sweep_file))
    assert code == 0, err
    assert "launcher: submitit: Slurm partition debug; per job 0 GPU, 1 CPU, 1 GB" in out
    arrays = {k: v for k, v in array_tasks(slurm_cluster).items() if k not in before}
    assert len(arrays) == 1, arrays  # the 4 jobs are the 4 tasks of one array
    ((array_id, tasks),) = arrays.items()
    assert sorted(tasks) == ["0", "1", "2", "3"]
    assert f"job ids {array_id}" in out

    # scancel the running sweep: every job is left incomplete, nothing is done.
    wait_until(lambda: "RUNNING" in array_tasks(slurm_cluster)[array_id].values(), 120, "job")
    slurm_cluster.run("scancel", array_id)
    ended = {"CANCELLED", "COMPLETED", "FAILED"}
    wait_until(lambda: set(array_tasks(slurm_cluster)[array_id].values()) <= ended, 60, "end")
    jobs = sorted(d for d in sweep.iterdir() if not d.name.startswith("."))
    assert len(jobs) == 4 and not any((d / "done").exists() for d in jobs)

    code, out, err = cli("sweep", str(sweep_file))
    assert code == 0, err
    assert "4 incomplete job(s) are left as they are" in out and "submitted" not in out

    # Resume with DomainBed's own sweep script: the same jobs as the file's.
    same_jobs = erm_sweep_args(tmp_path / "data", sweep, "--steps", "5")
    out = domainbed_script("sweep", "delete_incomplete", *same_jobs, "--command_launcher", "local")
    assert "Deleted 4 jobs!" in out
    use_cluster(slurm_cluster, cpus="1", mem_gb="1")
    before = set(array_tasks(slurm_cluster))
    out = domainbed_script("sweep", "launch", *same_jobs, "--command_launcher", "submitit")
    assert "submitit: submitted 4 job(s)" in out and "Launched 4 jobs!" in out
    arrays = {k: v for k, v in array_tasks(slurm_cluster).items() if k not in before}
    assert [sorted(tasks) for tasks in arrays.values()] == [["0", "1", "2", "3"]]  # one array
    wait_until(lambda: all((d / "done").exists() for d in jobs), 240, "4 done files")
    for job in jobs:
        assert (job / "results.jsonl").read_text().count("\n") == 2  # steps 0 and 4
        assert (job / "submitit.out").resolve().is_file()

    table = domainbed_script("collect_results", "--input_dir", str(sweep))
    assert "Total records: 8" in table
    row = next(
        line
        for line in table.split("training-domain validation set")[1].splitlines()
        if line.startswith("ERM")
    )
    assert len(re.findall(r"\d+\.\d \+/- \d+\.\d", row)) == 4

    arrays = set(array_tasks(slurm_cluster))
    code, out, err = cli("sweep", str(sweep_file))
    assert code == 0, err
    assert "4 job(s): 0 to launch, 4 done, 0 incomplete" in out and "submitted" not in out
    out = domainbed_script("sweep", "launch", *same_jobs, "--command_launcher", "submitit")
    assert "submitit: nothing to submit" in out and "Launched 0 jobs!" in out
    assert set(array_tasks(slurm_cluster)) == arrays
