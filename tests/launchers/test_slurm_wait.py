"""How the wait reads Slurm's queue and a job's exception, and what of its error output it
reports (the waiting itself runs against a real cluster in tests/slurm/test_wait_on_slurm.py)."""

import os

import submitit

from dmg_domainbed.launchers.array_task import run_command
from dmg_domainbed.launchers.slurm_wait import QueueWatcher, error_tail, failure

TRACEBACK = [
    "warning: something",
    "Traceback (most recent call last):",
    '  File "train.py", line 1, in <module>',
    "    main()",
    "ValueError: bad value",
    "  hint line of the message",
]
# Stand-in for squeue: what the controller lists (job 1_4 it no longer knows).
SQUEUE = """#!/bin/sh
echo '1_0|RUNNING'; echo '1_1|CANCELLED'; echo '1_2|PREEMPTED'; echo '1_3|CONFIGURING'
echo '9|FAILED'
"""


def test_the_watcher_reads_the_queue_and_knows_which_states_end_a_job(tmp_path, monkeypatch):
    (tmp_path / "squeue").write_text(SQUEUE)
    (tmp_path / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    watcher = QueueWatcher()
    jobs = ["1_0", "1_1", "1_2", "1_3", "1_4"]
    for job in jobs:
        watcher.register_job(job)
    watcher.update()
    assert [watcher.get_state(job, mode="cache") for job in jobs] == [
        "RUNNING",
        "CANCELLED",
        "PREEMPTED",
        "CONFIGURING",
        "GONE",
    ]
    # Pre-empted (its requeue follows) and a node still booting are not ended.
    assert [watcher.is_done(job, mode="cache") for job in jobs] == [False, True, False, False, True]


def test_a_failed_job_s_verdict_is_its_exception(tmp_path):
    for cluster in ("local", "debug"):
        executor = submitit.AutoExecutor(folder=tmp_path / cluster, cluster=cluster)
        failing, passing = executor.map_array(run_command, ["echo oops >&2; exit 3", "true"])
        assert failure(failing.exception()) == "CommandFailed: the command exited with status 3"
        assert failure(passing.exception()) is None


def test_an_error_stream_ending_in_a_traceback_shows_its_exception():
    exception = ["ValueError: bad value", "  hint line of the message"]
    assert error_tail(TRACEBACK, "CommandFailed") == exception
    assert error_tail(TRACEBACK[:1], "CommandFailed") == TRACEBACK[:1]


def test_a_slurm_log_shows_what_the_command_printed():
    launcher_s_own = [
        "submitit ERROR (2026-01-01 00:00:01,000) - Submitted job triggered an exception",
        "Traceback (most recent call last):",
        '  File "array_task.py", line 1, in run_command',
        "dmg_domainbed.launchers.array_task.CommandFailed: the command exited with status 3",
        "srun: error: node1: task 0: Exited with exit code 1",
    ]
    log = ["submitit INFO (2026-01-01 00:00:00,000) - Starting", "no data on node 7"]
    assert error_tail(log + launcher_s_own, "CommandFailed") == ["no data on node 7"]
    # A traceback of the command's own is the cause.
    assert error_tail(TRACEBACK + launcher_s_own, "CommandFailed") == TRACEBACK[-2:]
