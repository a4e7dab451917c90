"""local_parallel: N commands at once, one GPU each, threads split over the cores, failures
reported after every job has finished."""

import shlex
import sys

import pytest

from dmg_domainbed.errors import UserError
from dmg_domainbed.launchers import local_parallel
from dmg_domainbed.launchers.local_parallel import LOG_NAME, local_parallel_launcher

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
