"""One run at a time per output folder: a second run is refused with who holds the folder, a
lock left by a dead run is taken over, and of several takers exactly one wins."""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from dmg_domainbed.errors import UserError
from dmg_domainbed.locks import LOCK_NAME, OWNER_FILE, FolderLock

# Takes the lock on argv[1] once the file argv[2] exists, says whether it won, holds it.
CONTENDER = textwrap.dedent(
    """
    import os, sys, time
    from dmg_domainbed.errors import UserError
    from dmg_domainbed.locks import FolderLock
    print("ready", flush=True)
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.001)
    try:
        FolderLock(sys.argv[1], command=f"run {os.getpid()}", stale_after_s=60).acquire()
    except UserError as error:
        print("refused:", error, flush=True)
    else:
        print("won", flush=True)
    time.sleep(60)
    """
)


def contenders(folder, go, count):
    """``count`` contender processes, started and waiting for ``go``."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", CONTENDER, str(folder), str(go)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    for process in processes:
        assert process.stdout.readline() == "ready\n"
    return processes


def outcomes(processes):
    """What each contender said; the winner holds the lock until all have tried."""
    lines = [process.stdout.readline().strip() for process in processes]
    for process in processes:
        process.kill()
        process.wait()
    return lines


def record(folder):
    return json.loads((folder / LOCK_NAME / OWNER_FILE).read_text())


def write_lock_of_another_machine(folder, heartbeat_age_s):
    """A lock as a run on another machine leaves it, its heartbeat ``heartbeat_age_s`` old."""
    lock = folder / LOCK_NAME
    lock.mkdir(parents=True)
    owner = lock / OWNER_FILE
    started = time.time() - 3600
    fields = dict(host="node-17", machine="node-17/boot/ns", pid=os.getpid(), started=started)
    owner.write_text(json.dumps(dict(token="remote", process_start=None, command="x", **fields)))
    os.utime(owner, (time.time() - heartbeat_age_s,) * 2)


def test_a_second_run_on_the_same_folder_is_refused_naming_the_first(tmp_path):
    go = tmp_path / "go"
    go.touch()
    (first,) = contenders(tmp_path / "out", go, 1)
    try:
        assert first.stdout.readline().strip() == "won"
        with pytest.raises(UserError) as refused:
            FolderLock(tmp_path / "out", command="second").acquire()
        message = str(refused.value)
        assert f"out is in use by another run: `run {first.pid}` (pid {first.pid} on " in message
        assert socket.gethostname() in message and "running since " in message
        assert f"wait for it to finish or stop it (kill {first.pid})" in message
        # alive on this machine: never taken over, however old its heartbeat
        os.utime(tmp_path / "out" / LOCK_NAME / OWNER_FILE, (time.time() - 1000,) * 2)
        with pytest.raises(UserError, match="in use by another run"):
            FolderLock(tmp_path / "out", stale_after_s=60).acquire()
    finally:
        first.kill()
        first.wait()


def test_a_run_killed_with_sigkill_leaves_a_lock_the_next_run_takes_over(tmp_path):
    go = tmp_path / "go"
    go.touch()
    (killed,) = contenders(tmp_path, go, 1)
    assert killed.stdout.readline().strip() == "won"
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    assert record(tmp_path)["pid"] == killed.pid  # its heartbeat is fresh: only the pid tells

    with FolderLock(tmp_path, command="next") as lock:
        assert record(tmp_path)["command"] == "next" and record(tmp_path)["pid"] == os.getpid()
        assert not lock.lost
    assert not (tmp_path / LOCK_NAME).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["go"]  # nothing left behind


def test_a_lock_from_another_machine_is_taken_over_only_once_its_heartbeat_is_old(tmp_path):
    write_lock_of_another_machine(tmp_path, heartbeat_age_s=30)
    with pytest.raises(UserError, match=r"`x` \(pid \d+ on node-17\).*last heartbeat 30 s ago"):
        FolderLock(tmp_path, stale_after_s=60).acquire()

    os.utime(tmp_path / LOCK_NAME / OWNER_FILE, (time.time() - 61,) * 2)
    with FolderLock(tmp_path, command="taker", stale_after_s=60):
        assert record(tmp_path)["command"] == "taker"


def test_the_holder_refreshes_its_heartbeat_and_notices_a_takeover(tmp_path, capsys):
    with FolderLock(tmp_path, heartbeat_s=0.02) as lock:
        owner = tmp_path / LOCK_NAME / OWNER_FILE
        os.utime(owner, (time.time() - 1000,) * 2)
        time.sleep(0.2)
        assert time.time() - owner.stat().st_mtime < 100

        # as a run on another machine takes it over: moved aside, replaced by its own
        os.rename(tmp_path / LOCK_NAME, tmp_path / "aside")
        write_lock_of_another_machine(tmp_path, heartbeat_age_s=0)
        time.sleep(0.2)
        assert lock.lost
    assert f"this process lost its lock of {tmp_path}" in capsys.readouterr().err
    assert record(tmp_path)["token"] == "remote"  # releasing left the new holder alone


def test_of_many_takers_of_a_stale_lock_exactly_one_wins(tmp_path):
    write_lock_of_another_machine(tmp_path, heartbeat_age_s=3600)
    go = tmp_path / "go"
    processes = contenders(tmp_path, go, 6)
    go.touch()
    said = outcomes(processes)
    winners = [p.pid for p, line in zip(processes, said) if line == "won"]
    assert len(winners) == 1, said
    refused = [line for line in said if line != "won"]
    assert all(f"`run {winners[0]}`" in line for line in refused), said


def test_a_taker_never_removes_a_lock_newer_than_the_one_it_judged_stale(tmp_path):
    write_lock_of_another_machine(tmp_path, heartbeat_age_s=3600)
    late = FolderLock(tmp_path, command="late", stale_after_s=60)
    judged = late._holder()
    assert judged.stale(60)
    with FolderLock(tmp_path, command="first", stale_after_s=60):
        late._take_over(judged)  # what `late` does next, after the other took the lock over
        assert record(tmp_path)["command"] == "first"
        with pytest.raises(UserError, match="in use by another run: `first`"):
            late.acquire()


def test_an_output_folder_under_a_file_is_a_user_error(tmp_path):
    (tmp_path / "file").touch()
    with pytest.raises(UserError, match=r"cannot write into .*file/out: Not a directory"):
        FolderLock(tmp_path / "file" / "out").acquire()
