"""Job requests against what a real partition offers: requests that cannot run are refused with
the settings, Slurm's words, what the partition offers and the fix, before any job folder is left
behind; unset settings default to what fits; the jobs get what was asked for."""

from __future__ import annotations

import math

import pytest

from dmg_domainbed.errors import UserError
from dmg_domainbed.launchers import submitit_launcher as launcher

from ..helpers import domainbed_script, erm_sweep_args
from .cluster import NODE_CPUS, SHORT_PARTITION, SHORT_PARTITION_MAX_MIN, array_tasks
from .conftest import job_environment


def node_memory_gb(cluster) -> float:
    """The node's memory as sinfo gives it, in GB rounded down to 0.1 GB."""
    (memory_mb,) = set(cluster.run("sinfo", "-h", "-N", "-o", "%m").split())
    return math.floor(int(memory_mb) / 1024 * 10) / 10


@pytest.mark.parametrize(
    "settings, message, slurm_said",
    [
        (
            {"gpus": "1"},
            r"Slurm refuses the jobs .*: per job gpus = 1 \(DMG_SUBMITIT_GPUS\).* at most 0 GPUs",
            "Invalid generic resource (gres) specification",
        ),
        (
            {"cpus": str(NODE_CPUS + 1)},
            rf"cpus = {NODE_CPUS + 1} \(DMG_SUBMITIT_CPUS\), .*nodes have at most 0 GPUs, "
            rf"{NODE_CPUS} CPUs",
            "Requested node configuration is not available",
        ),
        (
            {"mem_gb": "4096"},
            r"mem_gb = 4096 \(DMG_SUBMITIT_MEM_GB\), and its nodes have at most .* GB",
            "Requested node configuration is not available",
        ),
        (  # Slurm's --test-only accepts it: the jobs would pend with PartitionTimeLimit
            {"partition": SHORT_PARTITION, "time_min": "60"},
            rf"time_min = 60 \(DMG_SUBMITIT_TIME_MIN\) is over the partition's time limit.*"
            rf"at most {SHORT_PARTITION_MAX_MIN}",
            None,
        ),
        (
            {"partition": "gpu"},
            r"partition = 'gpu' .* does not exist.* debug\*, short",
            None,
        ),
        (  # through Slurm's own variable
            {"SBATCH_CONSTRAINT": "nosuchfeature"},
            r"partition debug:\s+Slurm refuses .*set too: SBATCH_CONSTRAINT",
            "Invalid feature specification",
        ),
    ],
)
def test_a_request_that_cannot_run_is_refused_naming_the_setting(
    settings, message, slurm_said, slurm_cluster
):
    env = job_environment(slurm_cluster, **{k: v for k, v in settings.items() if k.islower()})
    env.update({k: v for k, v in settings.items() if k.isupper()})
    with pytest.raises(UserError, match=message) as refused:
        launcher.check(env)
    assert ("(sbatch --test-only: " in str(refused.value)) == (slurm_said is not None)
    assert slurm_said is None or slurm_said in str(refused.value)  # Slurm's own words


def test_unset_resources_default_to_what_the_partition_offers(slurm_cluster, use_cluster, tmp_path):
    memory = node_memory_gb(slurm_cluster)

    def share_gb(cpus: int) -> float:
        """32 GB, or the job's CPU share of the node's memory (to 0.1 GB below) if less."""
        return min(32, math.floor(memory * cpus / NODE_CPUS * 10) / 10)

    # No GPU on a partition without GPUs; the node's CPUs (fewer than 8) and their memory.
    described = launcher.check(job_environment(slurm_cluster))
    assert (
        f"partition debug; per job 0 GPU, {NODE_CPUS} CPU, {share_gb(NODE_CPUS):g} GB, 1440 min"
        in described
    )
    one_cpu = launcher.check(job_environment(slurm_cluster, partition=SHORT_PARTITION, cpus="1"))
    assert f"1 CPU, {share_gb(1):g} GB, {SHORT_PARTITION_MAX_MIN} min" in one_cpu

    # Jobs with the defaults start and finish (none pends forever).
    use_cluster(slurm_cluster, folder=str(tmp_path / "logs"), wait="true")
    launcher.submitit_launcher(["true", "true"])


def test_jobs_get_the_resources_and_arrays_that_were_asked_for(
    slurm_cluster, use_cluster, tmp_path
):
    use_cluster(
        slurm_cluster,
        partition=SHORT_PARTITION,
        cpus="1",
        mem_gb="1.5",
        time_min="7",
        array_parallelism="1",
        max_array_size="2",
        folder=str(tmp_path / "logs"),
        wait="true",
    )
    before = set(array_tasks(slurm_cluster))
    launcher.submitit_launcher(["true", "true", "true"])
    arrays = sorted(set(array_tasks(slurm_cluster)) - before, key=int)
    # At most 2 a submission: an array of 2 tasks, then a single job (submitit's for one).
    assert [sorted(array_tasks(slurm_cluster)[a]) for a in arrays] == [["0", "1"], ["N/A"]]
    shown = slurm_cluster.run("scontrol", "show", "job", f"{arrays[0]}_0")
    for field in (
        f"Partition={SHORT_PARTITION}",
        "NumCPUs=1",
        "MinMemoryNode=1.50G",
        "TimeLimit=00:07:00",
        "ArrayTaskThrottle=1",
        "JobName=domainbed",
    ):
        assert field in shown, field
    assert "gpu" not in shown.lower()  # no GPU request for CPU jobs


def test_domainbed_s_own_sweep_refused_leaves_no_job_folder_behind(
    slurm_cluster, use_cluster, tmp_path
):
    use_cluster(slurm_cluster, cpus="8")
    sweep = tmp_path / "sweep"
    # DomainBed's own sweep script, in this process (where DomainBed is already imported).
    arguments = erm_sweep_args(tmp_path / "data", sweep, "--command_launcher", "submitit")
    with pytest.raises(UserError, match=r"cpus = 8 \(DMG_SUBMITIT_CPUS\)") as refused:
        domainbed_script("sweep", "launch", *arguments)
    assert "The 4 empty job folder(s) made for the jobs not launched were removed" in (
        str(refused.value)
    )
    # DomainBed made the 4 folders, the launcher removed them: the next run launches all 4.
    assert list(sweep.iterdir()) == []


def test_a_submission_sbatch_refuses_removes_only_empty_job_folders(
    slurm_cluster, use_cluster, tmp_path
):
    # More tasks in one array than Slurm's MaxArraySize (1001): only sbatch itself refuses it.
    use_cluster(slurm_cluster, cpus="1", max_array_size="1002", folder=str(tmp_path / "logs"))
    empty, used = tmp_path / "sweep" / "empty", tmp_path / "sweep" / "used"
    empty.mkdir(parents=True)
    used.mkdir()
    (used / "out.txt").write_text("a file of an earlier run\n")
    commands = [f"true --output_dir {empty}", f"true --output_dir {used}"] + ["true"] * 1000
    with pytest.raises(UserError, match="submitting 1002 job.* at job 1: .*array") as refused:
        launcher.submitit_launcher(commands)
    assert "The 1 empty job folder(s)" in str(refused.value)
    assert not empty.exists() and (used / "out.txt").exists()


def test_a_sweep_file_that_cannot_run_stops_before_any_job_folder(
    slurm_cluster, use_cluster, tmp_path, capsys
):
    from dmg_domainbed.cli import main

    use_cluster(slurm_cluster)
    sweep_file = tmp_path / "sweep.toml"
    sweep_file.write_text(
        '[sweep]\nalgorithms = ["ERM"]\ndatasets = ["RotatedDigits"]\nn_hparams = 1\n'
        f'n_trials = 1\ndata_dir = "{tmp_path}"\noutput_dir = "{tmp_path / "sweep"}"\n'
        '[launcher]\nname = "submitit"\ngpus = 1\n'
    )
    assert main(["sweep", str(sweep_file)]) == 2
    assert "launcher submitit: the jobs cannot run on partition debug" in capsys.readouterr().err
    assert not (tmp_path / "sweep").exists()
