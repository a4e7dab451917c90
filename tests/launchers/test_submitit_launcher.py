"""submitit launcher: Slurm arrays with the settings of the environment (checked against a
stand-in ``sbatch``), clear failures, and real DomainBed jobs through submitit's local executor
(see tests/cli/test_sweep.py)."""

import os
import stat
import sys

import pytest

from dmg_domainbed.errors import UserError
from dmg_domainbed.launchers import submitit_launcher as launcher

from ..helpers import domainbed_env, run_domainbed

FAKE_SBATCH = """#!/bin/sh
# Stand-in for Slurm's sbatch: keeps the submitted script and answers like sbatch.
dir=$(dirname "$0")
n=$(( $(cat "$dir/count" 2>/dev/null || echo 100) + 1 ))
echo $n > "$dir/count"
cp "$1" "$dir/sbatch_$n.sh"
echo "Submitted batch job $n"
"""
FAILING_SBATCH = """#!/bin/sh
echo "sbatch: error: invalid partition specified: nosuch" >&2
exit 1
"""


def fake_slurm(folder, sbatch):
    """A folder with ``sbatch`` and ``srun`` stand-ins, to put first on PATH."""
    folder.mkdir()
    for name, text in (("sbatch", sbatch), ("srun", "#!/bin/sh\nexit 0\n")):
        path = folder / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return folder


@pytest.fixture
def slurm_env(monkeypatch):
    for name in [n for n in os.environ if n.startswith("DMG_SUBMITIT_")]:
        monkeypatch.delenv(name)

    def use(bin_dir, **settings):
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        for name, value in settings.items():
            monkeypatch.setenv(f"DMG_SUBMITIT_{name.upper()}", value)

    return use


def commands(sweep_dir, n):
    return [f"echo job {i} --output_dir {sweep_dir / f'job{i}'}" for i in range(n)]


def test_jobs_become_slurm_arrays_with_the_settings_of_the_environment(slurm_env, tmp_path):
    bin_dir = fake_slurm(tmp_path / "bin", FAKE_SBATCH)
    slurm_env(
        bin_dir,
        partition="gpu",
        gpus="2",
        cpus="6",
        mem_gb="40",
        time_min="90",
        array_parallelism="3",
        max_array_size="4",
    )
    sweep = tmp_path / "sweep"
    launcher.submitit_launcher(commands(sweep, 6))

    scripts = sorted(bin_dir.glob("sbatch_*.sh"))
    assert len(scripts) == 2  # 6 jobs, at most 4 per array
    first, second = (s.read_text() for s in scripts)
    for line in (
        "--partition=gpu",
        "--gpus-per-node=2",
        "--cpus-per-task=6",
        "--mem=40GB",
        "--time=90",
        "--array=0-3%3",
        f"--output={sweep}/.submitit/%A_%a_0_log.out",
    ):
        assert f"#SBATCH {line}" in first, line
    assert "#SBATCH --array=0-1%2" in second
    link = sweep / "job5" / "submitit.out"
    assert link.is_symlink()
    assert os.path.realpath(link) == str(sweep / ".submitit" / "102_1_0_log.out")


def test_a_failed_submission_raises_with_sbatch_s_message(slurm_env, tmp_path):
    slurm_env(fake_slurm(tmp_path / "bin", FAILING_SBATCH), partition="nosuch")
    with pytest.raises(UserError, match="invalid partition specified: nosuch"):
        launcher.submitit_launcher(commands(tmp_path / "sweep", 2))


def test_domainbed_sweep_exits_non_zero_when_submission_fails(tmp_path):
    bin_dir = fake_slurm(tmp_path / "bin", FAILING_SBATCH)
    env = domainbed_env(DMG_SUBMITIT_CLUSTER="slurm", DMG_SUBMITIT_PARTITION="nosuch")
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    result = run_domainbed(
        "sweep",
        "launch",
        "--datasets",
        "Debug28",
        "--algorithms",
        "ERM",
        "--n_hparams",
        "1",
        "--n_trials",
        "1",
        "--single_test_envs",
        "--data_dir",
        str(tmp_path / "data"),
        "--output_dir",
        str(tmp_path / "sweep"),
        "--command_launcher",
        "submitit",
        "--skip_confirmation",
        env=env,
        check=False,
    )
    assert result.returncode != 0
    assert "UserError" in result.stderr and "invalid partition specified" in result.stderr
    assert "Launched" not in result.stdout


def test_without_slurm_the_error_says_how_to_run_locally(slurm_env, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))
    with pytest.raises(UserError, match="DMG_SUBMITIT_CLUSTER=local"):
        launcher.check(os.environ)
    with pytest.raises(UserError, match="DMG_SUBMITIT_CLUSTER=local"):
        launcher.submitit_launcher(commands(tmp_path / "sweep", 1))


def test_settings_are_checked_and_waiting_is_the_default_off_slurm(slurm_env, tmp_path):
    assert launcher.settings({})["wait"] is False
    assert launcher.settings({"DMG_SUBMITIT_CLUSTER": "local"})["wait"] is True
    assert launcher.settings({"DMG_SUBMITIT_CLUSTER": "debug", "DMG_SUBMITIT_WAIT": "0"})["wait"]
    with pytest.raises(UserError, match="DMG_SUBMITIT_MEM_GB = 'lots'"):
        launcher.settings({"DMG_SUBMITIT_MEM_GB": "lots"})


def test_registered_in_domainbed():
    from domainbed import command_launchers

    assert command_launchers.REGISTRY["submitit"] is launcher.submitit_launcher
