"""submitit launcher without a Slurm cluster: what it reads from Slurm on partitions unlike the
single-node test cluster (GPU nodes, mixed nodes, time limits: sinfo's answer, the defaults that
fit, Slurm's refusal passed on with what the nodes offer; squeue's answer), the exact #SBATCH
lines of a GPU request (a stand-in ``sinfo`` offers GPUs and a stand-in ``sbatch`` keeps the
script), what a job does when it runs again, what of a failed job's error output is reported,
the settings, and the error without Slurm.

Everything else is proven on a real cluster in tests/slurm/ and, through submitit's local
executor, in tests/cli/test_sweep.py."""

import os
import stat
import sys

import pytest
import submitit

from dmg_domainbed.errors import UserError
from dmg_domainbed.launchers import array_task, slurm
from dmg_domainbed.launchers import submitit_launcher as launcher
from dmg_domainbed.locks import FolderLock

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
    array_task.run_command(f"touch {tmp_path / 'ran'} && false --output_dir {job}")
    assert not (tmp_path / "ran").exists()
    assert (job / "results.jsonl").read_text() == '{"step": 0}\n'


def test_a_job_that_runs_again_sets_its_interrupted_attempt_aside(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    (job / "results.jsonl").write_text('{"step": 0}\n')
    (job / "submitit.out").symlink_to(tmp_path / "log.out")
    command = f"echo '{{\"step\": 9}}' >> {job}/results.jsonl # --output_dir {job}"
    array_task.run_command(command)
    assert (job / "results.jsonl").read_text() == '{"step": 9}\n'
    assert (job / "interrupted_attempt_1" / "results.jsonl").read_text() == '{"step": 0}\n'
    assert (job / "submitit.out").is_symlink()
    with pytest.raises(array_task.CommandFailed, match="exited with status 3"):
        array_task.run_command(f"exit 3 # --output_dir {job}")
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


SINFO = """\
gpu|2-00:00:00|UNLIMITED|32|257000|gpu:v100:4(S:0-1)
gpu|2-00:00:00|UNLIMITED|64|515000|gpu:a100:8(S:0-1),shard:16
cpu*|infinite|48|128|1030000|(null)
tiny|30:00|UNLIMITED|4|8000|(null)
mix|infinite|UNLIMITED|64|102400|(null)
mix|infinite|UNLIMITED|8|409600|gpu:2
"""
# Stand-in for sbatch --test-only: Slurm's fit rule on the node configurations above (a node
# with the GPUs, CPUs and memory asked for); every job refused on partition "closed".
TEST_ONLY_SBATCH = """#!{python}
import sys
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[2:-2])
nodes = {{"gpu": [(4, 32, 257000), (8, 64, 515000)], "tiny": [(0, 4, 8000)],
         "mix": [(0, 64, 102400), (2, 8, 409600)], "closed": []}}[args["partition"]]
need = (int(args.get("gpus-per-node", 0)), int(args["cpus-per-task"] if "cpus-per-task" in args
        else 1), int(args.get("mem", "1M")[:-1]))
if not any(all(n >= w for n, w in zip(node, need)) for node in nodes):
    sys.exit("allocation failure: Requested node configuration is not available")
"""


@pytest.mark.parametrize(
    "text, minutes",
    [
        ("infinite", None),
        ("UNLIMITED", None),
        ("30", 30),
        ("30:00", 30),
        ("10:30", 11),
        ("2:00:00", 120),
        ("1-00:00:00", 1440),
        ("2-12", 3600),
        ("1-01:30", 1530),
    ],
)
def test_slurm_time_limits_in_minutes(text, minutes):
    assert slurm.parse_minutes(text) == minutes


def test_sinfo_lines_become_partitions_of_node_configurations():
    partitions = slurm.parse_sinfo(SINFO)
    assert list(partitions) == ["gpu", "cpu", "tiny", "mix"]
    gpu, cpu, tiny = partitions["gpu"], partitions["cpu"], partitions["tiny"]
    assert [(n.cpus, n.gpus) for n in gpu.nodes] == [(32, 4), (64, 8)]
    assert gpu.max_time_min == 2880 and not gpu.default
    assert cpu.default and cpu.max_time_min is None
    assert cpu.nodes == [slurm.Node(48, 1005.8, 0)]  # MaxCPUsPerNode under 128; MB to 0.1 GB down
    assert tiny.max_time_min == 30


def unset(**given):
    return {"gpus": None, "cpus": None, "mem_gb": None, "time_min": None, **given}


def request(gpus, cpus, mem_gb, time_min):
    return {"gpus": gpus, "cpus": cpus, "mem_gb": mem_gb, "time_min": time_min}


def test_defaults_fit_each_partition():
    partitions = slurm.parse_sinfo(SINFO)
    gpu, cpu, tiny = partitions["gpu"], partitions["cpu"], partitions["tiny"]
    assert slurm.default_request(gpu, unset()) == request(1, 8, 32.0, 1440)
    assert slurm.default_request(cpu, unset()) == request(0, 8, 32.0, 1440)
    # 4 CPUs: all of them, all the memory; the partition's 30 minutes.
    assert slurm.default_request(tiny, unset()) == request(0, 4, 7.8, 30)
    assert slurm.default_request(tiny, unset(cpus=1))["mem_gb"] == 1.9  # a quarter of the node
    # 2 GPUs: sized for the node that has them (8 CPUs, 400 GB), not the 64-CPU one.
    assert slurm.default_request(partitions["mix"], unset(gpus=2)) == request(2, 8, 32.0, 1440)
    assert slurm.default_request(partitions["mix"], unset(cpus=64))["mem_gb"] == 32.0


def test_unknown_and_missing_default_partitions():
    partitions = slurm.parse_sinfo(SINFO)
    assert slurm.choose(partitions, None).name == "cpu"
    with pytest.raises(UserError, match=r"partition = 'gpus' .* gpu, cpu\*, tiny, mix"):
        slurm.choose(partitions, "gpus")
    with pytest.raises(UserError, match="no default partition"):
        slurm.choose(slurm.parse_sinfo(SINFO.replace("cpu*", "cpu")), None)


@pytest.fixture
def test_only_env(tmp_path):
    """Stand-ins for sinfo (the partitions of ``SINFO``) and ``sbatch --test-only``."""
    sbatch, sinfo = tmp_path / "sbatch", tmp_path / "sinfo"
    sbatch.write_text(TEST_ONLY_SBATCH.format(python=sys.executable))
    sinfo.write_text(
        f"#!/bin/sh\ncat <<'END'\n{SINFO}closed|infinite|UNLIMITED|4|8192|(null)\nEND\n"
    )
    for stand_in in (sbatch, sinfo):
        stand_in.chmod(0o755)
    return {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}


def refused(given, name, environ):
    with pytest.raises(UserError) as refusal:
        slurm.fit(given, name, environ)
    return str(refusal.value)


def test_slurm_s_refusal_is_passed_on_with_the_request_and_what_the_nodes_offer(test_only_env):
    big = request(8, 64, 500, 2880)
    assert slurm.fit(big, "gpu", test_only_env) == ("gpu", big)
    message = refused(unset(gpus=1, cpus=5, mem_gb=9, time_min=60), "tiny", test_only_env)
    assert message.startswith("the jobs cannot run on partition tiny:\n  time_min = 60 ")
    assert "(DMG_SUBMITIT_TIME_MIN) is over the partition's time limit" in message
    assert "pending forever. Set time_min to at most 30" in message
    assert (
        "Slurm refuses the jobs (sbatch --test-only: allocation failure: Requested node "
        "configuration is not available): per job gpus = 1 (DMG_SUBMITIT_GPUS), cpus = 5 "
        "(DMG_SUBMITIT_CPUS), mem_gb = 9 (DMG_SUBMITIT_MEM_GB), and its nodes have at most "
        "0 GPUs, 4 CPUs, 7.8 GB" in message
    )
    assert "at most 8 GPUs, 64 CPUs" in refused(unset(gpus=9), "gpu", test_only_env)
    # Each alone fits some node, together none: Slurm's word decides.
    assert slurm.fit(request(2, 8, 300, 10), "mix", test_only_env)[0] == "mix"
    message = refused(unset(gpus=2, cpus=32, mem_gb=50), "mix", test_only_env)
    assert "Requested node configuration is not available): per job gpus = 2" in message


def test_a_partition_slurm_refuses_names_slurm_s_own_variables(test_only_env):
    message = refused(unset(), "closed", {**test_only_env, "SBATCH_CONSTRAINT": "x"})
    assert "cpus = 4 (the default)" in message
    assert message.endswith("Slurm's own variables are set too: SBATCH_CONSTRAINT")


TRACEBACK = [
    "warning: something",
    "Traceback (most recent call last):",
    '  File "train.py", line 1, in <module>',
    "    main()",
    "ValueError: bad value",
    "  hint line of the message",
]
# Stand-in for squeue: first what the controller lists (job 1_4 it no longer knows), then
# nothing (it has forgotten every job).
SQUEUE = """#!/bin/sh
[ -e "$0.asked" ] && exit 0
touch "$0.asked"
echo '1_0|RUNNING'; echo '1_1|CANCELLED'; echo '1_2|PREEMPTED'; echo '1_3|CONFIGURING'
echo '9|FAILED'
"""


def test_the_wait_reads_the_queue_and_knows_which_states_end_a_job(tmp_path, monkeypatch):
    (tmp_path / "squeue").write_text(SQUEUE)
    (tmp_path / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(slurm, "GRACE_S", 0.0)
    monkeypatch.setattr(slurm, "POLL_FIRST_S", 0.01)
    ids = ["1_0", "1_1", "1_2", "1_3", "1_4", "9"]
    said = []
    verdicts = slurm.wait_for([submitit.SlurmJob(tmp_path, job_id) for job_id in ids], said.append)
    # Pre-empted (its requeue follows) and a node still booting are not ended.
    assert said[0] == "submitit: waiting for 3 of 6 job(s): 1 configuring, 1 preempted, 1 running"
    gone = "Slurm no longer knows the job"
    assert verdicts["1_1"] == "cancelled (Slurm state CANCELLED)"
    assert verdicts["9"] == "ended without a result (Slurm state FAILED)"
    assert all(verdicts[job_id].startswith(gone) for job_id in ("1_0", "1_2", "1_3", "1_4"))


def test_a_failed_job_s_verdict_is_its_exception(tmp_path):
    for cluster in ("local", "debug"):
        executor = submitit.AutoExecutor(folder=tmp_path / cluster, cluster=cluster)
        failing, passing = executor.map_array(
            array_task.run_command, ["echo oops >&2; exit 3", "true"]
        )
        assert (
            slurm.failure(failing.exception()) == "CommandFailed: the command exited with status 3"
        )
        assert slurm.failure(passing.exception()) is None


def test_an_error_stream_ending_in_a_traceback_shows_its_exception():
    exception = ["ValueError: bad value", "  hint line of the message"]
    assert slurm.error_tail(TRACEBACK) == exception
    assert slurm.error_tail(TRACEBACK[:1]) == TRACEBACK[:1]


def test_a_slurm_log_shows_what_the_command_printed():
    launcher_s_own = [
        "submitit ERROR (2026-01-01 00:00:01,000) - Submitted job triggered an exception",
        "Traceback (most recent call last):",
        '  File "array_task.py", line 1, in run_command',
        "dmg_domainbed.launchers.array_task.CommandFailed: the command exited with status 3",
        "srun: error: node1: task 0: Exited with exit code 1",
    ]
    log = ["submitit INFO (2026-01-01 00:00:00,000) - Starting", "no data on node 7"]
    assert slurm.error_tail(log + launcher_s_own) == ["no data on node 7"]
    # A traceback of the command's own is the cause.
    assert slurm.error_tail(TRACEBACK + launcher_s_own) == TRACEBACK[-2:]


def test_called_by_domainbed_on_a_locked_sweep_folder_it_submits_nothing(gpu_cluster, tmp_path):
    sweep = tmp_path / "sweep"
    for i in range(2):
        (sweep / f"job{i}").mkdir(parents=True)  # as DomainBed makes them before calling it
    with FolderLock(sweep):
        with pytest.raises(
            UserError, match=f"in use by another run: `.*` \\(pid {os.getpid()} on "
        ):
            launcher.submitit_launcher(commands(sweep, 2))
    assert not list(gpu_cluster.glob("sbatch_*.sh")) and not (gpu_cluster / "count").exists()
    assert [p.name for p in sweep.iterdir() if not p.name.startswith(".")] == []


def test_a_failed_job_whose_folder_is_gone_is_named_with_the_cause(tmp_path):
    (tmp_path / "job1").mkdir()
    jobs = [submitit.SlurmJob(tmp_path, job_id) for job_id in ("7_0", "7_1")]
    found = slurm.failures(
        jobs, commands(tmp_path, 2), {"7_0": "CommandFailed: exit 1", "7_1": "CommandFailed: x"}
    )
    assert found[0].hint.startswith(f"its folder {tmp_path / 'job0'} no longer exists")
    assert "`sweep delete_incomplete`" in found[0].hint
    assert found[1].hint is None  # its folder is there: no such cause
