"""Waiting for jobs on a real Slurm cluster (``wait = true``): a failing job is reported with its
cause, a pre-empted job runs again without losing finished work, and a cancelled or vanished
job ends the wait in bounded time, with and without accounting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from dmg_domainbed.launchers import slurm
from dmg_domainbed.launchers.submitit_launcher import running_jobs

from .cluster import array_tasks, preempt
from .conftest import job_environment, wait_until

LAUNCH = (
    "import json, sys\n"
    "from dmg_domainbed.launchers.submitit_launcher import submitit_launcher\n"
    "submitit_launcher(json.loads(sys.argv[1]))\n"
)


@pytest.fixture
def start_launcher():
    """Start the launcher in a process of its own, as DomainBed's sweep script calls it; a
    launcher still waiting when the test ends is stopped."""
    started = []

    def start(env: dict[str, str], commands: list[str]) -> subprocess.Popen:
        process = subprocess.Popen(
            [sys.executable, "-c", LAUNCH, json.dumps(commands)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.communicate()


def domainbed_job(
    sweep: Path, test_env: int, steps: int, hparams: str | None = None, algorithm: str = "ERM"
) -> str:
    """DomainBed's train command of one RotatedDigits job of ``algorithm`` (with ``hparams``),
    with its folder made as DomainBed's sweep makes it before calling the launcher."""
    from domainbed.scripts.sweep import Job

    args = {
        "dataset": "RotatedDigits",
        "algorithm": algorithm,
        "test_envs": [test_env],
        "holdout_fraction": 0.2,
        "hparams_seed": 0,
        "data_dir": str(sweep.parent / "data"),
        "task": "domain_generalization",
        "trial_seed": 0,
        "seed": test_env,
        "steps": steps,
        **({"hparams": hparams} if hparams else {}),
    }
    job = Job(args, str(sweep))
    os.makedirs(job.output_dir)
    return job.command_str


def files_of(folder: Path) -> dict[str, tuple[int, int]]:
    """Size and modification time of the files a job wrote (not the links to Slurm's logs)."""
    return {
        p.name: (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.iterdir()
        if not p.is_symlink()
    }


def output_dir(command: str) -> Path:
    return Path(command.split("--output_dir ")[1].split()[0])


def logged_steps(results: Path) -> list[int]:
    return [json.loads(line)["step"] for line in results.read_text().splitlines()]


@dataclass
class Run:
    """What one waiting launcher did with four jobs, one of them pre-empted."""

    output: str
    returncode: int
    long_job: str
    short_dir: Path
    long_dir: Path
    short_files: dict[str, tuple[int, int]]
    queued_while_training: dict[Path, str]
    queued_at_the_end: dict[Path, str]


@pytest.fixture(scope="module")
def preempted_run(slurm_cluster, tmp_path_factory):
    """One waiting launcher, four jobs on the node's two CPUs: a short DomainBed job; a long one,
    pre-empted (SIGTERM and USR2, as submitit's own helper sends them) once the short one is
    done and the long one is training; a DomainBed job with a bad hparam and a plain command
    that fails, which run on the CPUs the others leave. Sharing the run keeps a CPU busy while
    the pre-empted job waits to run again."""
    sweep = tmp_path_factory.mktemp("preempted") / "sweep"
    # The long one trains for seconds after its first record, however fast the machine (its MLP
    # eight times DomainBed's width: some 20 ms a step here): Slurm may take 5 s to accept the
    # pre-emption ("Job can not be altered now"), and the job must still run then.
    short = domainbed_job(sweep, 0, steps=5)
    long = domainbed_job(sweep, 1, steps=500, hparams='{"mlp_width": 1024}')
    bad_hparam = domainbed_job(sweep, 2, steps=5, hparams='{"lambda_overlap": -1}', algorithm="DMG")
    no_output_dir = "echo cannot reach the data server at $((6000 + 66)) >&2; exit 3"
    logs = str(sweep.parent / "logs")  # the plain command names no --output_dir
    env = job_environment(slurm_cluster, cpus="1", mem_gb="1", wait="true", folder=logs)
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCH, json.dumps([short, long, bad_hparam, no_output_dir])],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        short_dir, long_dir = (output_dir(c) for c in (short, long))
        wait_until(lambda: (short_dir / "done").exists(), 180, "short job done")
        short_files = files_of(short_dir)
        wait_until(lambda: (long_dir / "results.jsonl").exists(), 120, "long job training")
        queued = running_jobs([long_dir], slurm_cluster.env())
        long_job = max(array_tasks(slurm_cluster), key=int) + "_1"
        preempt(slurm_cluster, long_job)
        output = launcher.communicate(timeout=300)[0]
        # A job writes its result, which ends the wait, just before its process ends: Slurm
        # may list it as running for a moment longer.
        deadline = time.monotonic() + 30
        while (ended := running_jobs([short_dir, long_dir], slurm_cluster.env())) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.5)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.communicate()
    return Run(
        output, launcher.returncode, long_job, short_dir, long_dir, short_files, queued, ended
    )


def test_a_failing_job_is_reported_with_the_cause_from_its_error_output(preempted_run):
    assert preempted_run.returncode != 0
    report = preempted_run.output.split("UserError: ", 1)[1]
    assert report.startswith("2 of 4 job(s) failed:")
    # DomainBed's job: the end of its err.txt, without the traceback's frames.
    assert "CommandFailed: the command exited with status 1" in report
    bad_hparam = "DMG hparam 'lambda_overlap' = -1 is not valid: it must be a number"
    assert f"dmg-domainbed: error: {bad_hparam}" in report  # the package's message alone
    assert "File " not in report and "_log.err" not in report
    # A command without an --output_dir: the end of its Slurm error log.
    assert "CommandFailed: the command exited with status 3" in report
    assert "      cannot reach the data server at 6066" in report


def test_a_preempted_job_runs_again_and_finished_work_is_kept(preempted_run, slurm_cluster):
    run = preempted_run
    assert f"job {run.long_job}" not in run.output  # not among the failed ones
    assert "Restarts=1" in slurm_cluster.run("scontrol", "show", "job", run.long_job)
    # The rerun logged every checkpoint once; the interrupted attempt is kept aside.
    assert logged_steps(run.long_dir / "results.jsonl") == [0, 100, 200, 300, 400, 499]
    assert (run.long_dir / "done").exists()
    first_attempt = run.long_dir / "interrupted_attempt_1"
    assert logged_steps(first_attempt / "results.jsonl")[0] == 0
    assert not (first_attempt / "done").exists()
    # The job that had finished is untouched.
    assert files_of(run.short_dir) == run.short_files


def test_a_job_folder_whose_job_still_runs_is_known_before_anything_deletes_it(preempted_run):
    # Read from the folder's link to its Slurm log and squeue; once the jobs ended (the
    # launcher waited for them), none is listed within seconds.
    assert preempted_run.queued_while_training == {preempted_run.long_dir: "RUNNING"}
    assert preempted_run.queued_at_the_end == {}


@pytest.mark.parametrize("which", ["slurm_cluster", "cluster_without_accounting"])
def test_the_wait_ends_soon_after_a_job_is_cancelled(which, request, start_launcher, tmp_path):
    cluster = request.getfixturevalue(which)
    env = job_environment(cluster, cpus="1", mem_gb="1", wait="true", folder=str(tmp_path))
    launcher = start_launcher(env, ["sleep 300", "sleep 300"])
    array = wait_until(
        lambda: next(
            (a for a, tasks in array_tasks(cluster).items() if "RUNNING" in tasks.values()), None
        ),
        120,
        "running job",
    )
    cancelled = time.monotonic()
    cluster.run("scancel", array)
    output = launcher.communicate(timeout=120)[0]
    waited = time.monotonic() - cancelled
    assert launcher.returncode != 0
    assert "2 of 2 job(s) failed" in output and output.count("cancelled (Slurm state") == 2
    assert waited < slurm.POLL_MAX_S + 15  # Slurm's kill (KillWait 5 s), then one poll


def test_the_wait_ends_when_slurm_no_longer_knows_a_job(
    cluster_without_accounting, use_cluster, tmp_path, monkeypatch
):
    import submitit

    use_cluster(cluster_without_accounting)
    monkeypatch.setattr(slurm, "GRACE_S", 1.0)
    never = submitit.SlurmJob(folder=tmp_path, job_id="999999_0")
    started = time.monotonic()
    verdicts = slurm.wait_for([never], say=lambda _: None)
    assert time.monotonic() - started < 10
    assert verdicts["999999_0"].startswith("Slurm no longer knows the job")
