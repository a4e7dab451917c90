"""The start-up hook never breaks the interpreter, whatever state the installation is in, and
costs a process that does not import DomainBed nothing but its own two small modules."""

import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

import dmg_domainbed
from dmg_domainbed import _startup

STARTUP_FILES = Path(__file__).resolve().parents[1] / "startup"
HOOK_MODULES = {"dmg_domainbed", "dmg_domainbed._startup"}
# What start-up left behind: the modules loaded and whether the import watcher is armed.
START_UP_STATE = (
    "import sys; print(' '.join(sorted(sys.modules))); "
    "print(any(type(f).__name__ == 'DomainBedImportWatcher' for f in sys.meta_path))"
)


@pytest.fixture(scope="module")
def clean_venvs(tmp_path_factory) -> dict[str, Path]:
    """The python of two virtual environments that see no other site-packages and can import
    this package: ``plain`` without the start-up hook, ``hooked`` with the hook's files."""
    pythons = {}
    for name in ("plain", "hooked"):
        root = tmp_path_factory.mktemp(name)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
        python = root / "bin" / "python"
        site = Path(
            start_up_state(python, "import sysconfig; print(sysconfig.get_path('purelib'))")
        )
        # sorts before dmg_domainbed.pth, as an installed package's folder is on the path first
        (site / "_dmg_domainbed_source.pth").write_text(
            f"{Path(dmg_domainbed.__file__).parents[1]}\n"
        )
        if name == "hooked":
            for hook in STARTUP_FILES.iterdir():
                shutil.copy(hook, site)
        pythons[name] = python
    return pythons


def start_up_state(python: Path, code: str = START_UP_STATE, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "DMG_"))}
    result = subprocess.run(
        [str(python), "-c", code], env=clean | env, capture_output=True, text=True, check=True
    )
    assert result.stderr == ""
    return result.stdout.strip()


def modules_and_watcher(python: Path, **env: str) -> tuple[set[str], bool]:
    modules, watching = start_up_state(python, **env).splitlines()
    return set(modules.split()), watching == "True"


def test_the_hook_imports_only_itself_until_domainbed_is_imported(clean_venvs):
    plain, watching = modules_and_watcher(clean_venvs["plain"])
    assert not watching
    hooked, watching = modules_and_watcher(clean_venvs["hooked"])
    assert watching
    assert hooked - plain == HOOK_MODULES


@pytest.mark.parametrize(
    "value, switched_off", [("1", True), ("yes", True), ("0", False), ("false", False), ("", False)]
)
def test_disable_variable_switches_the_hook_off_unless_0_false_or_empty(
    clean_venvs, value, switched_off
):
    plain, _ = modules_and_watcher(clean_venvs["plain"])
    hooked, watching = modules_and_watcher(clean_venvs["hooked"], DMG_DOMAINBED_DISABLE=value)
    assert watching is not switched_off
    assert hooked - plain == HOOK_MODULES


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
