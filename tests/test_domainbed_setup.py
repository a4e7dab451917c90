"""``dmg-domainbed install-domainbed``: real git clones of the DomainBed checkout this test run
imports (a git clone at the tested commit, here and in CI), into temporary folders; the ``.pth``
goes into a temporary site-packages, never into this environment's."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dmg_domainbed import TESTED_DOMAINBED_COMMIT, domainbed_setup
from dmg_domainbed.cli import main
from dmg_domainbed.datasets.check.downloads import domainbed_checkout
from dmg_domainbed.errors import UserError

from .helpers import read_only


def git(*args, cwd):
    answer = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return answer.stdout.strip()


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A bare repository cloned from the DomainBed this run imports: what a cluster without
    GitHub would give ``--from``."""
    local = domainbed_checkout()
    if local is None or domainbed_setup.checkout_commit(local) is None:
        pytest.fail(f"the DomainBed this test run imports ({local}) is not a git checkout")
    bare = tmp_path_factory.mktemp("mirror") / "DomainBed.git"
    git("clone", "--quiet", "--bare", str(local), str(bare), cwd=local)
    return bare


def importable_from(purelib: Path) -> str:
    """Where a Python that reads only ``purelib``'s .pth files imports DomainBed from."""
    code = (
        f"import site; site.addsitedir({str(purelib)!r}); "
        "import domainbed; print(domainbed.__file__)"
    )
    return subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def install(source, folder, purelib, **kwargs):
    said = []
    domainbed_setup.install_domainbed(str(source), folder, purelib, say=said.append, **kwargs)
    return "\n".join(said)


def test_installs_the_tested_commit_and_makes_it_importable(source, tmp_path):
    folder, purelib = tmp_path / "env" / "src" / "DomainBed", tmp_path / "site-packages"
    said = install(source, folder, purelib)
    assert domainbed_setup.checkout_commit(folder) == TESTED_DOMAINBED_COMMIT
    assert importable_from(purelib) == str(folder / "domainbed" / "__init__.py")
    assert domainbed_setup.installed_folder(purelib) == folder
    assert f"wrote {purelib / domainbed_setup.PTH_NAME}" in said
    assert [p.name for p in folder.parent.iterdir()] == ["DomainBed"]  # no temporary folder left


def test_a_second_run_changes_nothing(source, tmp_path):
    folder, purelib = tmp_path / "DomainBed", tmp_path / "site-packages"
    install(source, folder, purelib)
    pth = purelib / domainbed_setup.PTH_NAME
    before = pth.stat().st_mtime_ns, (folder / ".git" / "HEAD").stat().st_mtime_ns
    said = install(source, folder, purelib)
    assert "already holds DomainBed at the tested commit" in said
    assert "already makes" in said and "wrote" not in said
    assert (pth.stat().st_mtime_ns, (folder / ".git" / "HEAD").stat().st_mtime_ns) == before


def test_a_checkout_at_another_commit_is_left_alone_unless_forced(source, tmp_path):
    folder, purelib = tmp_path / "DomainBed", tmp_path / "site-packages"
    install(source, folder, purelib)
    git("checkout", "--quiet", "--detach", "HEAD~1", cwd=folder)
    older = git("rev-parse", "HEAD", cwd=folder)
    with pytest.raises(UserError) as error:
        install(source, folder, purelib)
    message = str(error.value)
    assert f"at commit {older[:12]}, not the tested {TESTED_DOMAINBED_COMMIT[:12]}" in message
    assert "--force" in message and "nothing was changed" in message
    assert git("rev-parse", "HEAD", cwd=folder) == older
    said = install(source, folder, purelib, force=True)
    assert domainbed_setup.checkout_commit(folder) == TESTED_DOMAINBED_COMMIT
    assert f"(was {older[:12]})" in said


def test_a_folder_that_is_not_domainbed_is_not_touched(source, tmp_path):
    folder, purelib = tmp_path / "DomainBed", tmp_path / "site-packages"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    for force in (False, True):
        with pytest.raises(UserError, match="is not a DomainBed git checkout; nothing was changed"):
            install(source, folder, purelib, force=force)
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]
    assert not purelib.exists()


def test_a_pth_naming_another_checkout_is_kept_unless_forced(source, tmp_path):
    purelib = tmp_path / "site-packages"
    install(source, tmp_path / "first", purelib)
    with pytest.raises(UserError, match=f"already makes {tmp_path / 'first'} importable"):
        install(source, tmp_path / "second", purelib)
    assert not (tmp_path / "second").exists()
    install(source, tmp_path / "second", purelib, force=True)
    assert domainbed_setup.installed_folder(purelib) == tmp_path / "second"


def test_a_source_that_does_not_exist_is_named(tmp_path):
    with pytest.raises(UserError, match="--from .*nope: no such folder"):
        install(tmp_path / "nope", tmp_path / "DomainBed", tmp_path / "site-packages")


def test_the_command_line(source, tmp_path, monkeypatch, capsys):
    purelib = tmp_path / "site-packages"
    monkeypatch.setattr(
        domainbed_setup,
        "pth_file",
        lambda given=None: (given or purelib) / domainbed_setup.PTH_NAME,
    )
    folder = tmp_path / "DomainBed"
    args = ["install-domainbed", "--from", str(source), "--dir", str(folder)]
    assert main(args) == 0
    assert domainbed_setup.installed_folder(purelib) == folder
    git("checkout", "--quiet", "--detach", "HEAD~1", cwd=folder)
    assert main(args) == 2
    assert "install-domainbed: error: " in capsys.readouterr().err


def test_version(capsys):
    from dmg_domainbed import __version__

    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0
    expected = f"dmg-domainbed {__version__} (tested with DomainBed {TESTED_DOMAINBED_COMMIT})\n"
    assert capsys.readouterr().out == expected


def test_a_dir_on_a_read_only_file_system_is_refused_before_anything_changes(source, tmp_path):
    purelib = tmp_path / "site-packages"
    with read_only(tmp_path / "mounted") as mounted:
        with pytest.raises(UserError) as refused:
            install(source, mounted / "DomainBed", purelib)
        assert list(mounted.iterdir()) == []
    message = str(refused.value)
    assert f"--dir '{mounted / 'DomainBed'}' cannot be made in '{mounted}'" in message
    assert "Give a folder you can write to" in message
    assert not purelib.exists()


def test_a_dir_naming_a_file_is_refused(source, tmp_path):
    file = tmp_path / "notes.txt"
    file.write_text("mine")
    with pytest.raises(UserError, match=f"--dir '{file}' is a file, so it cannot be a folder"):
        install(source, file, tmp_path / "site-packages")
    with pytest.raises(UserError, match=f"DomainBed' lies under '{file}', which is a file"):
        install(source, file / "DomainBed", tmp_path / "site-packages")
    assert file.read_text() == "mine"


def test_a_read_only_site_packages_is_refused_before_the_clone(source, tmp_path):
    folder = tmp_path / "DomainBed"
    with read_only(tmp_path / "site-packages") as purelib:
        with pytest.raises(UserError) as refused:
            install(source, folder, purelib)
    message = str(refused.value)
    assert f"{domainbed_setup.PTH_NAME} in this Python's site-packages '{purelib}'" in message
    assert "Nothing was changed" in message and "a virtual environment" in message
    assert list(tmp_path.iterdir()) == [purelib]  # no clone


def test_a_source_that_is_a_folder_but_not_a_repository_is_named_in_our_words(tmp_path):
    plain = tmp_path / "downloads"
    plain.mkdir()
    with pytest.raises(UserError) as refused:
        install(plain, tmp_path / "DomainBed", tmp_path / "site-packages")
    message = str(refused.value)
    assert f"--from {plain} is a folder but not a git repository" in message
    assert "fatal:" not in message and "give --from a DomainBed git checkout" in message
    assert not (tmp_path / "DomainBed").exists()


def test_an_unreachable_url_says_how_to_install_with_from(tmp_path):
    unreachable = "https://127.0.0.1:9/DomainBed.git"  # nothing listens on the discard port
    with pytest.raises(UserError) as refused:
        install(unreachable, tmp_path / "DomainBed", tmp_path / "site-packages")
    message = str(refused.value)
    assert f"git could not fetch DomainBed from {unreachable}" in message
    assert "run again with `--from THAT_FOLDER`" in message
    assert [p.name for p in tmp_path.iterdir()] == []  # no partial clone, no .pth


# Stands in for `git` on PATH: a clone runs the real git, then waits to be killed.
STALLED_GIT = """#!/bin/sh
"$REAL_GIT" "$@" || exit $?
case " $* " in *" clone "*) touch "$CLONED"; sleep 600;; esac
"""


def test_a_run_killed_mid_clone_leaves_no_checkout_and_the_next_run_installs(source, tmp_path):
    bin_dir, folder, purelib = tmp_path / "bin", tmp_path / "env" / "DomainBed", tmp_path / "site"
    bin_dir.mkdir()
    (bin_dir / "git").write_text(STALLED_GIT)
    (bin_dir / "git").chmod(0o755)
    cloned = tmp_path / "cloned"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "REAL_GIT": shutil.which("git"),
        "CLONED": str(cloned),
    }
    code = (
        "import sys; from pathlib import Path; from dmg_domainbed import domainbed_setup; "
        "domainbed_setup.install_domainbed(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))"
    )
    # The process killed mid-clone is what is tested: a process of its own
    run = subprocess.Popen(
        [sys.executable, "-c", code, str(source), str(folder), str(purelib)],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not cloned.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cloned.exists(), "the clone did not start"
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    left = [p.name for p in folder.parent.iterdir()]  # its temporary folder, nothing in place
    assert len(left) == 1 and left[0].startswith(".DomainBed.partial-") and not purelib.exists()
    install(source, folder, purelib)
    assert domainbed_setup.checkout_commit(folder) == TESTED_DOMAINBED_COMMIT
    assert domainbed_setup.installed_folder(purelib) == folder
