"""The start-up hook never breaks the interpreter, whatever state the installation is in."""

import subprocess
import sys
import types
from pathlib import Path

from dmg_domainbed import _startup

STARTUP_FILES = Path(__file__).resolve().parents[1] / "startup"


def test_pth_line_is_silent_when_the_package_cannot_be_imported():
    line = (STARTUP_FILES / "dmg_domainbed.pth").read_text().strip()
    assert line.startswith("import ")  # only such lines are executed by site.py
    # -S: no site-packages, so the package is not importable
    result = subprocess.run(
        [sys.executable, "-S", "-c", f"{line}\nprint('started')"],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
    )
    assert result.returncode == 0 and result.stdout == "started\n" and result.stderr == ""


def test_start_file_names_the_hook_for_pep_829():
    target = (STARTUP_FILES / "dmg_domainbed.start").read_text().strip()
    module, _, function = target.partition(":")
    assert module == _startup.__name__ and getattr(_startup, function) is _startup.install


def test_a_failing_registration_is_reported_and_does_not_raise(capsys):
    broken = types.ModuleType("domainbed.algorithms")  # no ALGORITHMS list: registration fails
    _startup._after_import(broken)
    error = capsys.readouterr().err
    assert "could not register plugins into domainbed.algorithms" in error
    assert "DomainBed's own algorithms still work" in error
