"""local_parallel: N commands at once, one or several per GPU, threads and data-loader workers
split over the cores, failures reported after every job has finished with what to lower when
one ran out of memory; called by DomainBed's sweep, it holds the sweep folder's lock."""

import os
import shlex
import sys
from pathlib import Path

import pytest

from dmg_domainbed.errors import UserError
from dmg_domainbed.launchers import local_parallel
from dmg_domainbed.launchers.common import failure_report, listed_devices, output_dir_of
from dmg_domainbed.launchers.local_parallel import LOG_NAME, local_parallel_launcher
from dmg_domainbed.locks import FolderLock

from ..helpers import domainbed_env, domainbed_script

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
        "DMG_LOCAL_PARALLEL_GPUS",
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
        local_parallel_launcher.check(dict(os.environ))
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
    report = failure_report(local_parallel.failures(outcomes), len(outcomes))
    assert hint in report and "torch.OutOfMemoryError: CUDA out of memory" in report
    alone = local_parallel.Plan(jobs=2, gpus=("0", "1"), threads=1, loader_workers=1, warm=True)
    hint_alone = alone.memory_hint(outcomes[0].returncode, outcomes[0].output)
    assert "with a GPU to itself: lower the batch size" in hint_alone


def test_a_command_of_the_warm_module_that_runs_as_a_new_process_says_why(clean_env, tmp_path):
    """A command naming the module in another form than ``python -m MODULE ARGUMENTS`` in
    plain words (here with an interpreter option) runs, as a new process, and the launcher
    says why it did not start warm."""
    clean_env.setenv("PATH", domainbed_env()["PATH"])
    plan = local_parallel.Plan(jobs=1, gpus=(), threads=1, loader_workers=1, warm=True)
    command = f"python -u -m tests.launchers.sleep_job 0 {tmp_path / 'ran'}"
    printed = []
    outcomes = local_parallel.run_commands(
        [command], plan, say=printed.append, warm_module="tests.launchers.sleep_job"
    )
    assert not outcomes[0].warm and outcomes[0].returncode == 0 and (tmp_path / "ran").exists()
    assert "1 command(s) naming tests.launchers.sleep_job start as new processes" in printed[0]
    assert "only `python -m tests.launchers.sleep_job ARGUMENTS` in plain words" in printed[0]
    assert printed[0].endswith(command)


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
    """As in a new process: a bug's exception with its traceback, the package's message for bad
    input alone (train.py copies its stderr into err.txt)."""
    from domainbed.scripts.sweep import Job

    clean_env.setenv("PATH", domainbed_env()["PATH"])
    clean_env.setenv("DMG_LOCAL_PARALLEL_JOBS", "1")
    args = {"dataset": "RotatedDigits", "algorithm": "NoSuchAlgorithm", "steps": 1}
    bug = Job(args, str(tmp_path / "sweep")).command_str
    args = {**args, "algorithm": "ERM", "hparams": '{"lrr": 0.001}'}
    misspelt = Job(args, str(tmp_path / "sweep")).command_str
    with pytest.raises(UserError, match="2 of 2 job"):
        local_parallel_launcher([bug, misspelt])
    printed = capsys.readouterr().out
    assert printed.count("FAILED (exit 1, warm") == 2
    job_dir = Path(output_dir_of(bug))
    log = (job_dir / LOG_NAME).read_text()
    assert "Traceback" in log and "NotImplementedError" in log
    assert (job_dir / "err.txt").exists() and not (job_dir / "done").exists()
    job_dir = Path(output_dir_of(misspelt))
    err = (job_dir / "err.txt").read_text()
    assert err.startswith("dmg-domainbed: error: ERM does not know hparam 'lrr'")
    assert err.count("\n") == 1 and "Traceback" not in (job_dir / LOG_NAME).read_text()


# nvidia-smi -L on a machine with GPU 0 split into two MIG instances and GPU 1 whole (driver 535).
MIG_LISTING = """\
GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)
  MIG 3g.40gb     Device  0: (UUID: MIG-c6d4f1ef-42e4-5de4-9ad6-0a3f5d9b2c1f)
  MIG 3g.40gb     Device  1: (UUID: MIG-0b6f7a1e-8c3d-5e2f-a4b9-7d1c2e3f4a5b)
GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718)
"""


def test_each_mig_instance_is_a_device_named_by_its_uuid():
    assert listed_devices(MIG_LISTING) == [
        "MIG-c6d4f1ef-42e4-5de4-9ad6-0a3f5d9b2c1f",
        "MIG-0b6f7a1e-8c3d-5e2f-a4b9-7d1c2e3f4a5b",
        "1",
    ]
    old_driver = "GPU 0: A100 (UUID: GPU-a)\n  MIG 1g.5gb Device 0: (UUID: MIG-GPU-a/7/0)\n"
    assert listed_devices(old_driver) == ["MIG-GPU-a/7/0"]
    assert listed_devices("GPU 0: H100 (UUID: GPU-x)\nGPU 1: H100 (UUID: GPU-y)\n") == [
        "0",
        "1",
    ]


def test_mig_instances_get_one_job_each(clean_env, monkeypatch):
    monkeypatch.setattr(local_parallel, "visible_gpus", lambda environ: listed_devices(MIG_LISTING))
    plan = local_parallel.Plan.from_environment()
    assert plan.jobs == 3
    assert [plan.job_environment(slot)["CUDA_VISIBLE_DEVICES"] for slot in range(3)] == [
        "MIG-c6d4f1ef-42e4-5de4-9ad6-0a3f5d9b2c1f",
        "MIG-0b6f7a1e-8c3d-5e2f-a4b9-7d1c2e3f4a5b",
        "1",
    ]


def test_gpus_false_runs_the_jobs_on_cores_with_every_gpu_hidden(clean_env, tmp_path):
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    clean_env.setenv("DMG_LOCAL_PARALLEL_GPUS", "false")
    clean_env.setattr(local_parallel, "usable_cores", lambda: 4)
    plan = local_parallel.Plan.from_environment()
    assert (plan.jobs, plan.gpus, plan.threads) == (4, (), 1)
    assert "on CPU (GPUs hidden from the jobs)" in plan.describe()
    out = tmp_path / "env"
    local_parallel_launcher([f"{PY} -c {shlex.quote(DUMP_ENV)} {out}"])
    assert out.read_text().split(" ") == ["", "1"]  # CUDA sees no device


def test_a_warm_job_refuses_a_fork_server_that_initialised_cuda():
    """Where CUDA runs, tests/gpu/test_gpu_launchers.py starts such a server for real."""
    local_parallel.check_cuda_untouched(False)
    with pytest.raises(UserError) as refused:
        local_parallel.check_cuda_untouched(True)
    message = str(refused.value)
    assert "initialised CUDA before forking" in message and "CUDA_VISIBLE_DEVICES" in message
    assert "DMG_LOCAL_PARALLEL_WARM=false" in message


def test_jobs_whose_environment_the_fork_server_lacks_start_as_new_processes(clean_env):
    """What the server's imports read at import (huggingface_hub: HF_HOME, HF_HUB_OFFLINE) a
    forked job would keep: such jobs start as new processes, saying why."""
    env = domainbed_env()
    clean_env.setenv("PATH", env["PATH"])
    same = {**os.environ, "CUDA_VISIBLE_DEVICES": "1", "DMG_LOCAL_PARALLEL_JOBS": "2", "X": "1"}
    assert local_parallel.warm_refusal(same) is None
    refusal = local_parallel.warm_refusal({**os.environ, "HF_HUB_OFFLINE": "1"})
    assert "differs from the fork server's in HF_HUB_OFFLINE" in refusal


SWEEP_ARGS = ("--datasets", "RotatedDigits", "--algorithms", "ERM", "--data_dir", ".")
SWEEP_ARGS += ("--n_hparams", "1", "--n_trials", "1", "--steps", "1", "--single_test_envs")


def test_domainbed_s_sweep_launching_into_a_locked_folder_runs_nothing(clean_env, tmp_path):
    sweep = tmp_path / "sweep"
    arguments = ("launch", *SWEEP_ARGS, "--output_dir", str(sweep), "--skip_confirmation")
    with FolderLock(sweep):
        with pytest.raises(UserError) as refused:
            domainbed_script("sweep", *arguments, "--command_launcher", "local_parallel")
    message = str(refused.value)
    assert f"{sweep} is in use by another run: `" in message
    assert f"(pid {os.getpid()} on " in message
    assert (
        "Nothing was launched. The 4 empty job folder(s) made for the jobs not launched were "
        "removed" in message
    )
    assert "`sweep delete_incomplete` is not stopped by the lock" in message
    assert [p.name for p in sweep.iterdir() if not p.name.startswith(".")] == []


def test_while_it_runs_domainbed_s_jobs_it_holds_their_sweep_folder_s_lock(clean_env, tmp_path):
    sweep, seen = tmp_path / "sweep", tmp_path / "holder"
    holder = (
        "import sys; from dmg_domainbed.locks import FolderLock; "
        "h = FolderLock(sys.argv[1]).holder(); open(sys.argv[2], 'w').write(str(h and h.pid))"
    )
    command = f"{PY} -c {shlex.quote(holder)} {sweep} {seen} --output_dir {sweep / 'job'}"
    local_parallel_launcher([command])
    assert seen.read_text() == str(os.getpid())
    assert FolderLock(sweep).holder() is None  # and gives it up when done


def test_a_job_whose_folder_was_deleted_while_it_ran_is_named_with_the_cause(clean_env, tmp_path):
    job_dir = tmp_path / "sweep" / "job"
    deleting = "import shutil, sys; shutil.rmtree(sys.argv[1]); sys.exit(1)"
    with pytest.raises(UserError) as failure:
        local_parallel_launcher(
            [f"{PY} -c {shlex.quote(deleting)} {job_dir} --output_dir {job_dir}"]
        )
    message = str(failure.value)
    assert f"its folder {job_dir} no longer exists: it was deleted while the job ran" in message
    assert "DomainBed's `sweep delete_incomplete`" in message
