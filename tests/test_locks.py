"""One run at a time per output folder: a second run is refused with who holds the folder, a
lock left by a dead run is taken over, and of several takers exactly one wins."""

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from dmg_domainbed import locks
from dmg_domainbed.errors import UserError
from dmg_domainbed.locks import LOCK_NAME, FolderLock

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
        FolderLock(sys.argv[1]).acquire()
    except UserError as error:
        print("refused:", " ".join(str(error).split()), flush=True)
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


def holder(folder):
    return FolderLock(folder).holder()


def expire_in(folder, seconds):
    """Set the lock's expiry (its modification time) ``seconds`` from now."""
    os.utime(folder / LOCK_NAME, (time.time() + seconds,) * 2)


def write_lock(folder, expires_in_s, host="node-17", pid=4242):
    """A lock as flufl.lock leaves it (by default, a run's on another machine): a claim file
    holding its own name, the lock a hard link to it."""
    claim = folder / f"{LOCK_NAME}|{host}|{pid}|77"
    claim.write_text(str(claim))
    os.link(claim, folder / LOCK_NAME)
    expire_in(folder, expires_in_s)


def test_a_second_run_on_the_same_folder_is_refused_naming_the_first(tmp_path, monkeypatch):
    go = tmp_path / "go"
    go.touch()
    (first,) = contenders(tmp_path / "out", go, 1)
    try:
        assert first.stdout.readline().strip() == "won"
        with pytest.raises(UserError) as refused:
            FolderLock(tmp_path / "out").acquire()
        message = str(refused.value)
        assert f"out is in use by another run: `{sys.executable} -c " in message
        assert f"(pid {first.pid} on {socket.getfqdn()}), running since " in message
        assert f"wait for it to finish or stop it (kill {first.pid})" in message
        # stopped on this machine: never taken over, however long ago its lock expired
        os.kill(first.pid, signal.SIGSTOP)
        monkeypatch.setattr(locks, "LIFETIME_S", 1)  # its last refresh a second after its start
        started = psutil.Process(first.pid).create_time()
        time.sleep(max(0.0, started + 3 - time.time()))
        os.utime(tmp_path / "out" / LOCK_NAME, (started + 2,) * 2)
        assert FolderLock(tmp_path / "out").holder().expires < time.time()
        with pytest.raises(UserError, match="in use by another run"):
            FolderLock(tmp_path / "out").acquire()
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
    assert holder(tmp_path).pid == killed.pid  # its lock has not expired: only the pid tells

    with FolderLock(tmp_path) as lock:
        assert holder(tmp_path).pid == os.getpid()
        assert not lock.lost
    assert sorted(p.name for p in tmp_path.iterdir()) == ["go"]  # nothing left behind


def test_a_lock_whose_pid_now_names_a_later_process_is_taken_over(tmp_path):
    """As after a reboot: the pid lives, but its process started after the lock's last refresh."""
    started = psutil.Process().create_time()
    expires = started - 10 + locks.LIFETIME_S - time.time()
    write_lock(tmp_path, expires, locks._machine(), os.getpid())
    with FolderLock(tmp_path) as lock:
        assert holder(tmp_path).claim == lock.lock.claimfile
    assert list(tmp_path.iterdir()) == []


# In a new pid namespace (its pid 1), runs CONTENDER (argv[2]) as the pid argv[1] + 1 there.
IN_NAMESPACE = """
import subprocess, sys
with open("/proc/sys/kernel/ns_last_pid", "w") as last:
    last.write(sys.argv[1])
subprocess.run([sys.executable, "-c", *sys.argv[2:]])
"""


def test_a_run_in_another_pid_namespace_of_this_host_is_not_judged_by_its_pid(tmp_path):
    """As a container of this host's name that shares the folder: its pid names no process here
    (or another), and its lock is taken over only once it expires."""
    if subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True).returncode:
        pytest.skip("`unshare --pid` is not permitted here (it needs root)")
    absent = next(pid for pid in range(5000, 4_000_000) if not psutil.pid_exists(pid))
    go = tmp_path / "go"
    go.touch()
    command = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", IN_NAMESPACE]
    inside = subprocess.Popen(
        [*command, str(absent - 1), CONTENDER, str(tmp_path / "out"), str(go)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert [inside.stdout.readline() for _ in range(2)] == ["ready\n", "won\n"]
        assert holder(tmp_path / "out").pid == absent and not psutil.pid_exists(absent)
        with pytest.raises(UserError, match=f"in use by another run: pid {absent} on .*expires"):
            FolderLock(tmp_path / "out").acquire()
    finally:
        os.killpg(inside.pid, signal.SIGKILL)
        inside.wait()


def test_a_lock_from_another_machine_is_taken_over_only_once_it_expired(tmp_path):
    write_lock(tmp_path, expires_in_s=240)
    with pytest.raises(UserError, match=r"pid 4242 on node-17\. .*once it expires, in 4 min"):
        FolderLock(tmp_path).acquire()

    expire_in(tmp_path, -1)
    with FolderLock(tmp_path):
        assert holder(tmp_path).pid == os.getpid()
    assert list(tmp_path.iterdir()) == []  # the other machine's claim went too


def test_the_holder_refreshes_its_lock_and_notices_a_takeover(tmp_path, capsys):
    with FolderLock(tmp_path, refresh_s=0.02) as lock:
        expire_in(tmp_path, -1000)
        time.sleep(0.3)
        assert holder(tmp_path).expires > time.time() + 200  # LIFETIME_S ahead again

        # as a run on another machine takes it over: removed, replaced by its own
        (tmp_path / LOCK_NAME).unlink()
        write_lock(tmp_path, expires_in_s=300)
        time.sleep(0.3)
        assert lock.lost
    err = capsys.readouterr().err
    assert f"this process lost its lock of {tmp_path}" in err and "pid 4242 on node-17" in err
    assert holder(tmp_path).host == "node-17"  # releasing left the new holder alone


def test_of_many_takers_of_a_stale_lock_exactly_one_wins(tmp_path):
    write_lock(tmp_path, expires_in_s=-3600)
    go = tmp_path / "go"
    processes = contenders(tmp_path, go, 6)
    go.touch()
    said = outcomes(processes)
    winners = [p.pid for p, line in zip(processes, said) if line == "won"]
    assert len(winners) == 1, said
    refused = [line for line in said if line != "won"]
    assert all(f"(pid {winners[0]} on " in line for line in refused), said


def test_a_taker_never_removes_a_lock_newer_than_the_one_it_judged_stale(tmp_path):
    write_lock(tmp_path, expires_in_s=-3600)
    late = FolderLock(tmp_path)
    judged = late.holder()
    assert judged.stale()
    with FolderLock(tmp_path):
        late._take_over(judged)  # what `late` does next, after the other took the lock over
        assert holder(tmp_path).pid == os.getpid()
        with pytest.raises(UserError, match=f"in use by another run: .*pid {os.getpid()} on "):
            late.acquire()


def test_an_output_folder_under_a_file_is_a_user_error(tmp_path):
    (tmp_path / "file").touch()
    with pytest.raises(UserError, match=r"cannot write into .*file/out: Not a directory"):
        FolderLock(tmp_path / "file" / "out").acquire()


def test_a_lock_of_the_earlier_folder_format_is_named_with_how_to_remove_it(tmp_path):
    (tmp_path / LOCK_NAME).mkdir()
    with pytest.raises(
        UserError, match=r"lock of an earlier version.*rm -r .*\.dmg-domainbed\.lock"
    ):
        FolderLock(tmp_path).acquire()
