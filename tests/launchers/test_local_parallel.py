"""local_parallel: N commands at once, one or several per GPU, threads and data-loader workers
split over the cores, failures reported after every job has finished with what to lower when
one ran out of memory."""

import os
import shlex
import sys
from pathlib import Path

import pytest

from dmg_domainbed.errors import UserError
from dmg_domainbed.launchers import local_parallel
from dmg_domainbed.launchers.common import output_dir_of
from dmg_domainbed.launchers.local_parallel import LOG_NAME, local_parallel_launcher

from ..helpers import domainbed_env

PY = shlex.quote(sys.executable)
# Waits (up to 30 s) for a marker file of the other job: both finish only if both run at once.
RENDEZVOUS = (
    "import pathlib, sys, time; d = pathlib.Path(sys.argv[1]); (d / sys.argv[2]).touch(); "
    "end = time.time() + 30\n"
    "while not (d / sys.argv[3]).exists():\n"
    "    time.sleep(0.05)\n"
    "    if time.time() > end: sys.exit(7)"
)
DUMP_ENV = (
    "import os, pathlib, sys; pathlib.Path(sys.argv[1]).write_text(' '.join("
    "os.environ.get(k, '-') for k in ('CUDA_VISIBLE_DEVICES', 'OMP_NUM_THREADS')))"
)


@pytest.fixture
def clean_env(monkeypatch):
    for name in (
        "DMG_LOCAL_PARALLEL_JOBS",
        "DMG_LOCAL_PARALLEL_JOBS_PER_GPU",
        "DMG_LOCAL_PARALLEL_WARM",
        "DMG_DOMAINBED_LOADER_WORKERS",
        "CUDA_VISIBLE_DEVICES",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
    ):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_runs_the_commands_at_the_same_time(clean_env, tmp_path):
    clean_env.setenv("DMG_LOCAL_PARALLEL_JOBS", "2")
    commands = [
        f"{PY} -c {shlex.quote(RENDEZVOUS)} {tmp_path} a b",
        f"{PY} -c {shlex.quote(RENDEZVOUS)} {tmp_path} b a",
    ]
    local_parallel_launcher(commands)
    assert {p.name for p in tmp_path.iterdir()} == {"a", "b"}


def test_each_job_gets_one_gpu_and_a_share_of_the_cores(clean_env, tmp_path):
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    clean_env.setattr(local_parallel, "usable_cores", lambda: 8)
    outputs = [tmp_path / f"env{i}" for i in range(4)]
    local_parallel_launcher([f"{PY} -c {shlex.quote(DUMP_ENV)} {out}" for out in outputs])
    seen = [out.read_text().split() for out in outputs]
    assert {gpu for gpu, _ in seen} <= {"3", "5"}
    assert {threads for _, threads in seen} == {"4"}  # 8 cores / 2 jobs (one per GPU)


def test_cpu_only_jobs_split_the_cores(clean_env, tmp_path):
    clean_env.setenv("DMG_LOCAL_PARALLEL_JOBS", "3")
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "")
    clean_env.setattr(local_parallel, "usable_cores", lambda: 7)
    out = tmp_path / "env"
    local_parallel_launcher([f"{PY} -c {shlex.quote(DUMP_ENV)} {out}"])
    gpus, threads = out.read_text().split(" ")
    assert (gpus, threads) == ("", "2")  # no GPU given; 7 cores // 3 jobs


def test_failures_are_reported_after_all_jobs_ran(clean_env, tmp_path):
    clean_env.setenv("DMG_LOCAL_PARALLEL_JOBS", "2")
    job_dir = tmp_path / "job"
    commands = [
        f"{PY} -c 'print(\"boom\"); raise SystemExit(3)' --output_dir {job_dir}",
        f"touch {tmp_path / 'second'}",
        f"touch {tmp_path / 'third'}",
    ]
    with pytest.raises(UserError) as failure:
        local_parallel_launcher(commands)
    message = str(failure.value)
    assert "1 of 3 job(s) failed" in message and "exit 3" in message
    assert str(job_dir / LOG_NAME) in message and "boom" in message
    assert (tmp_path / "second").exists() and (tmp_path / "third").exists()
    assert "boom" in (job_dir / LOG_NAME).read_text()


def test_a_bad_number_of_jobs_is_rejected_before_anything_runs(clean_env, tmp_path):
    clean_env.setenv("DMG_LOCAL_PARALLEL_JOBS", "zero")
    with pytest.raises(UserError, match="DMG_LOCAL_PARALLEL_JOBS = 'zero'.*integer"):
        local_parallel_launcher([f"touch {tmp_path / 'x'}"])
    assert not (tmp_path / "x").exists()


def test_registered_in_domainbed():
    from domainbed import command_launchers

    assert command_launchers.REGISTRY["local_parallel"] is local_parallel_launcher


DUMP_JOB_ENV = (
    "import os, pathlib, sys; pathlib.Path(sys.argv[1]).write_text(' '.join(os.environ.get(k, '-')"
    " for k in ('CUDA_VISIBLE_DEVICES', 'OMP_NUM_THREADS', 'DMG_DOMAINBED_LOADER_WORKERS')))"
)


def test_several_jobs_share_each_gpu_and_split_the_cores(clean_env, tmp_path):
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    clean_env.setenv("DMG_LOCAL_PARALLEL_JOBS_PER_GPU", "3")
    clean_env.setattr(local_parallel, "usable_cores", lambda: 12)
    plan = local_parallel.Plan.from_environment()
    assert (plan.jobs, plan.jobs_per_gpu, plan.threads, plan.loader_workers) == (6, 3, 2, 2)
    assert "6 at a time on GPUs 3,5 (3 per GPU)" in plan.describe()
    outputs = [tmp_path / f"env{i}" for i in range(6)]
    # All six wait for each other: they only finish if they all run at once.
    commands = [
        f"{PY} -c {shlex.quote(DUMP_JOB_ENV + '; ' + RENDEZVOUS_ALL)} {out} {tmp_path} {i} 6"
        for i, out in enumerate(outputs)
    ]
    local_parallel_launcher(commands)
    seen = sorted(out.read_text().split() for out in outputs)
    assert seen == [["3", "2", "2"]] * 3 + [["5", "2", "2"]] * 3


RENDEZVOUS_ALL = (
    "import time; d = pathlib.Path(sys.argv[2]); (d / f'ready{sys.argv[3]}').touch(); "
    "end = time.time() + 60\n"
    "while len(list(d.glob('ready*'))) < int(sys.argv[4]):\n"
    "    time.sleep(0.05)\n"
    "    if time.time() > end: sys.exit(7)"
)


def test_a_loader_workers_setting_reaches_every_job(clean_env, tmp_path):
    clean_env.setenv("DMG_DOMAINBED_LOADER_WORKERS", "5")
    clean_env.setenv("DMG_LOCAL_PARALLEL_JOBS", "2")
    out = tmp_path / "env"
    local_parallel_launcher([f"{PY} -c {shlex.quote(DUMP_JOB_ENV)} {out}"])
    assert out.read_text().split()[2] == "5"


@pytest.mark.parametrize(
    "name, value, allowed",
    [
        ("DMG_LOCAL_PARALLEL_JOBS_PER_GPU", "0", "integer >= 1"),
        ("DMG_DOMAINBED_LOADER_WORKERS", "-1", "integer >= 0"),
        ("DMG_LOCAL_PARALLEL_WARM", "maybe", "true or false"),
    ],
)
def test_bad_settings_are_rejected_before_anything_runs(clean_env, tmp_path, name, value, allowed):
    clean_env.setenv(name, value)
    with pytest.raises(UserError, match=f"{name} = '?{value}'?.*{allowed}"):
        local_parallel.check(dict(os.environ))
    with pytest.raises(UserError):
        local_parallel_launcher([f"touch {tmp_path / 'x'}"])
    assert not (tmp_path / "x").exists()


def test_a_job_out_of_gpu_memory_names_the_setting_to_lower(clean_env, tmp_path):
    """A job that raised torch's CUDA out-of-memory error while sharing its GPU (a warm job of
    the probe module; the diagnosis reads the log, the same for every kind of job)."""
    clean_env.setenv("PATH", domainbed_env()["PATH"])
    plan = local_parallel.Plan(jobs=4, gpus=("0", "1"), threads=1, loader_workers=1, warm=True)
    job_dir = tmp_path / "job"
    command = f"python -m tests.launchers.probe_job oom --output_dir {job_dir}"
    printed = []
    outcomes = local_parallel.run_commands(
        [command], plan, say=printed.append, warm_module="tests.launchers.probe_job"
    )
    assert outcomes[0].warm and outcomes[0].returncode == 1
    hint = "out of GPU memory: lower jobs_per_gpu (DMG_LOCAL_PARALLEL_JOBS_PER_GPU, now 2)"
    assert hint in printed[-1]
    report = local_parallel.failure_report(outcomes)
    assert hint in report and "torch.OutOfMemoryError: CUDA out of memory" in report
    alone = local_parallel.Plan(jobs=2, gpus=("0", "1"), threads=1, loader_workers=1, warm=True)
    hint_alone = alone.memory_hint(outcomes[0].returncode, outcomes[0].log)
    assert "with a GPU to itself: lower the batch size" in hint_alone


def test_a_job_killed_by_sigkill_is_reported_with_the_memory_settings(clean_env, tmp_path):
    clean_env.setenv("DMG_LOCAL_PARALLEL_JOBS", "2")
    clean_env.setenv("DMG_DOMAINBED_LOADER_WORKERS", "3")
    job_dir = tmp_path / "job"
    suicide = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    with pytest.raises(UserError) as failure:
        local_parallel_launcher([f"{PY} -c {shlex.quote(suicide)} --output_dir {job_dir}"])
    message = str(failure.value)
    assert "killed by SIGKILL" in message and "out-of-memory killer" in message
    assert "lower jobs (DMG_LOCAL_PARALLEL_JOBS, now 2)" in message
    assert "loader_workers (DMG_DOMAINBED_LOADER_WORKERS, now 3)" in message


def test_a_failing_domainbed_job_started_warm_is_reported(clean_env, tmp_path, capsys):
    from domainbed.scripts.sweep import Job

    clean_env.setenv("PATH", domainbed_env()["PATH"])
    clean_env.setenv("DMG_LOCAL_PARALLEL_JOBS", "1")
    args = {"dataset": "RotatedDigits", "algorithm": "NoSuchAlgorithm", "steps": 1}
    command = Job(args, str(tmp_path / "sweep")).command_str
    with pytest.raises(UserError, match="1 of 1 job"):
        local_parallel_launcher([command])
    printed = capsys.readouterr().out
    assert "FAILED (exit 1, warm" in printed
    job_dir = Path(output_dir_of(command))
    assert "NotImplementedError" in (job_dir / LOG_NAME).read_text()
    assert (job_dir / "err.txt").exists() and not (job_dir / "done").exists()
