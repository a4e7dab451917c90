"""The DomainBed checkout's commit, as the doctor reports it (domainbed_setup.checkout_commit)."""

import subprocess

from dmg_domainbed.domainbed_setup import checkout_commit


def git(folder, *args):
    return subprocess.run(
        ["git", "-C", str(folder), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def commit(folder, message):
    git(
        folder,
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        message,
    )


def test_the_commit_checked_out_on_a_branch_or_detached(tmp_path):
    git(tmp_path, "init", "-q")
    for message in ("first", "second"):
        commit(tmp_path, message)
    head, first = git(tmp_path, "rev-parse", "HEAD"), git(tmp_path, "rev-parse", "HEAD~1")
    assert checkout_commit(tmp_path) == head
    git(tmp_path, "checkout", "-q", first)
    assert checkout_commit(tmp_path) == first


def test_no_git_folder_gives_none(tmp_path):
    assert checkout_commit(tmp_path) is None


def test_a_folder_inside_another_checkout_gives_none(tmp_path):
    """DomainBed copied into another repository: that repository's commit is not DomainBed's."""
    git(tmp_path, "init", "-q")
    commit(tmp_path, "x")
    (tmp_path / "DomainBed").mkdir()
    assert checkout_commit(tmp_path / "DomainBed") is None
