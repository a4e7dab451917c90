"""submitit launcher without a Slurm cluster: the exact #SBATCH lines of a GPU request (the test
cluster has no GPU, so a stand-in ``sinfo`` offers one and a stand-in ``sbatch`` accepts every
request and keeps the script), what a job does when it runs again, the settings, and the error
without Slurm.

Everything else is proven on a real cluster in tests/slurm/ and, through submitit's local
executor, in tests/cli/test_sweep.py."""

import os
import stat
import sys

import pytest

from dmg_domainbed.errors import UserError
from dmg_domainbed.launchers import submitit_launcher as launcher

GPU_SINFO = """#!/bin/sh
# Stand-in for sinfo --format="%P|%l|%B|%c|%m|%G": a partition of 8-GPU nodes.
echo "gpu*|2-00:00:00|UNLIMITED|64|515000|gpu:a100:8(S:0-1)"
"""
KEEPING_SBATCH = """#!/bin/sh
# Stand-in for sbatch: accepts every --test-only request; keeps a submitted script and answers
# like sbatch.
[ "$1" = --test-only ] && exit 0
dir=$(dirname "$0")
n=$(( $(cat "$dir/count" 2>/dev/null || echo 100) + 1 ))
echo $n > "$dir/count"
cp "$1" "$dir/sbatch_$n.sh"
echo "Submitted batch job $n"
"""


@pytest.fixture
def gpu_cluster(monkeypatch, tmp_path):
    """``sinfo``, ``sbatch``, ``srun`` and ``squeue`` stand-ins first on PATH; no DMG_SUBMITIT_
    settings."""
    for name in [n for n in os.environ if n.startswith("DMG_SUBMITIT_")]:
        monkeypatch.delenv(name)
    folder = tmp_path / "bin"
    folder.mkdir()
    stand_ins = {"sinfo": GPU_SINFO, "sbatch": KEEPING_SBATCH, "srun": "", "squeue": ""}
    for name, text in stand_ins.items():
        path = folder / name
        path.write_text(text or "#!/bin/sh\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder


def commands(sweep_dir, n):
    return [f"echo job {i} --output_dir {sweep_dir / f'job{i}'}" for i in range(n)]


def test_gpu_jobs_become_arrays_with_the_exact_sbatch_lines(gpu_cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("DMG_SUBMITIT_GPUS", "2")
    monkeypatch.setenv("DMG_SUBMITIT_ARRAY_PARALLELISM", "3")
    monkeypatch.setenv("DMG_SUBMITIT_MAX_ARRAY_SIZE", "4")
    sweep = tmp_path / "sweep"
    launcher.submitit_launcher(commands(sweep, 6))

    scripts = sorted(gpu_cluster.glob("sbatch_*.sh"))
    assert len(scripts) == 2  # 6 jobs, at most 4 per array
    first, second = (s.read_text() for s in scripts)
    for line in (
        "--partition=gpu",
        "--gpus-per-node=2",
        "--cpus-per-task=8",
        "--mem=32GB",
        "--time=1440",
        "--array=0-3%3",
        "--signal=USR2@90",
        f"--output={sweep}/.submitit/%A_%a_0_log.out",
    ):
        assert f"#SBATCH {line}" in first, line
    assert "#SBATCH --array=0-1%2" in second
    link = sweep / "job5" / "submitit.out"
    assert link.is_symlink()
    assert os.path.realpath(link) == str(sweep / ".submitit" / "102_1_0_log.out")


def test_defaults_on_a_gpu_partition(gpu_cluster):
    # One GPU, DomainBed's 8 loader CPUs, 32 GB (under the 8-CPU share of 503 GB), 1440 min
    # (under the 2-day limit).
    assert launcher.check(os.environ) == (
        "Slurm partition gpu; per job 1 GPU, 8 CPU, 32 GB, 1440 min; 256 at a time"
    )


def test_a_job_whose_done_file_exists_is_not_run_again(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    (job / "done").write_text("done")
    (job / "results.jsonl").write_text('{"step": 0}\n')
    launcher.run_command(f"touch {tmp_path / 'ran'} && false --output_dir {job}")
    assert not (tmp_path / "ran").exists()
    assert (job / "results.jsonl").read_text() == '{"step": 0}\n'


def test_a_job_that_runs_again_sets_its_interrupted_attempt_aside(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    (job / "results.jsonl").write_text('{"step": 0}\n')
    (job / "submitit.out").symlink_to(tmp_path / "log.out")
    command = f"echo '{{\"step\": 9}}' >> {job}/results.jsonl # --output_dir {job}"
    launcher.run_command(command)
    assert (job / "results.jsonl").read_text() == '{"step": 9}\n'
    assert (job / "interrupted_attempt_1" / "results.jsonl").read_text() == '{"step": 0}\n'
    assert (job / "submitit.out").is_symlink()
    with pytest.raises(launcher.CommandFailed, match="exited with status 3"):
        launcher.run_command(f"exit 3 # --output_dir {job}")
    assert (job / "interrupted_attempt_2" / "results.jsonl").exists()


def test_without_slurm_the_error_says_how_to_run_locally(tmp_path, monkeypatch):
    monkeypatch.delenv("DMG_SUBMITIT_CLUSTER", raising=False)
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))
    job = tmp_path / "sweep" / "job0"
    job.mkdir(parents=True)  # as DomainBed makes it before calling the launcher
    with pytest.raises(UserError, match="DMG_SUBMITIT_CLUSTER=local"):
        launcher.check(os.environ)
    with pytest.raises(UserError, match="DMG_SUBMITIT_CLUSTER=local.*1 empty job folder"):
        launcher.submitit_launcher(commands(tmp_path / "sweep", 1))
    assert not job.exists()


def test_settings_are_checked_and_waiting_is_the_default_off_slurm():
    assert launcher.settings({})["wait"] is False
    assert launcher.settings({"DMG_SUBMITIT_CLUSTER": "local"})["wait"] is True
    assert launcher.settings({"DMG_SUBMITIT_CLUSTER": "debug", "DMG_SUBMITIT_WAIT": "0"})["wait"]
    with pytest.raises(UserError, match="DMG_SUBMITIT_MEM_GB = 'lots'"):
        launcher.settings({"DMG_SUBMITIT_MEM_GB": "lots"})


def test_registered_in_domainbed():
    from domainbed import command_launchers

    assert command_launchers.REGISTRY["submitit"] is launcher.submitit_launcher
