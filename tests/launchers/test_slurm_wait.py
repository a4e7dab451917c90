"""How the wait judges a job from Slurm's answers, and what of its error output it reports
(the waiting itself runs against a real cluster in tests/slurm/test_wait_on_slurm.py)."""

from pathlib import Path

from dmg_domainbed.launchers.slurm_wait import (
    Task,
    command_output,
    judge,
    without_traceback_frames,
)

TRACEBACK = [
    "warning: something",
    "Traceback (most recent call last):",
    '  File "train.py", line 1, in <module>',
    "    main()",
    "ValueError: bad value",
    "  hint line of the message",
]


def tasks(*ids: str) -> dict[str, Task]:
    return {i: Task(i, "true", Path(f"/nowhere/{i}.pkl"), Path("/nowhere/err"), None) for i in ids}


def test_a_job_is_judged_by_its_state_and_how_long_it_has_ended():
    waiting = tasks("1_0", "1_1", "1_2", "1_3", "1_4")
    states = {"1_0": "RUNNING", "1_1": "CANCELLED", "1_2": "TIMEOUT", "1_3": "PENDING"}
    ended_at: dict[str, float] = {}
    first = judge(waiting, states, ended_at, now=100.0, grace_s=15)
    assert list(first) == ["1_1"] and first["1_1"].reason.startswith("cancelled")
    # Ended (or unknown to Slurm) without a result: failed once the grace has passed.
    assert judge(waiting, states, ended_at, now=114.0, grace_s=15) == {"1_1": first["1_1"]}
    later = judge(waiting, states, ended_at, now=115.0, grace_s=15)
    assert sorted(later) == ["1_1", "1_2", "1_4"]
    assert later["1_2"].reason == "ended without a result (Slurm state TIMEOUT)"
    assert later["1_4"].reason.startswith("Slurm no longer knows the job")


def test_a_requeued_job_starts_its_grace_again():
    waiting = tasks("7_0")
    ended_at: dict[str, float] = {}
    assert judge(waiting, {"7_0": "PREEMPTED"}, ended_at, now=0.0, grace_s=15) == {}
    assert judge(waiting, {"7_0": "PENDING"}, ended_at, now=10.0, grace_s=15) == {}
    assert judge(waiting, {"7_0": "COMPLETED"}, ended_at, now=20.0, grace_s=15) == {}
    assert judge(waiting, {"7_0": "COMPLETED"}, ended_at, now=35.0, grace_s=15) != {}


def test_an_error_stream_ending_in_a_traceback_shows_its_exception():
    assert without_traceback_frames(TRACEBACK) == [
        "ValueError: bad value",
        "  hint line of the message",
    ]
    assert without_traceback_frames(TRACEBACK[:1]) == TRACEBACK[:1]


def test_a_slurm_log_shows_what_the_command_printed():
    log = [
        "submitit INFO (2026-01-01 00:00:00,000) - Starting with JobEnvironment(...)",
        "no data on node 7",
        "submitit ERROR (2026-01-01 00:00:01,000) - Submitted job triggered an exception",
        "Traceback (most recent call last):",
        '  File "submitit_launcher.py", line 1, in run_command',
        "dmg_domainbed.launchers.submitit_launcher.CommandFailed: the command exited with status 3",
        "srun: error: node1: task 0: Exited with exit code 1",
    ]
    assert command_output(log, "CommandFailed") == ["no data on node 7"]
    # A traceback of the command's own stays: it is the cause.
    assert command_output(TRACEBACK, "CommandFailed") == TRACEBACK
