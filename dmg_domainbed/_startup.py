"""Start-up hook: register the plugins whenever DomainBed's library modules are imported.

``dmg_domainbed.pth`` (and ``dmg_domainbed.start`` for Python 3.15+, PEP 829) call
:func:`install` in every Python process of the environment: it puts a meta-path finder first,
which hands each watched DomainBed module to :mod:`dmg_domainbed.integration` once it has run.
So it imports nothing a bare ``python -c pass`` has not loaded (``sys`` and ``os``: no
``importlib.abc``, no ``from __future__``; ``benchmarks/startup_cost.py`` measures the rest),
reports any failure on stderr without breaking the interpreter, and does nothing when
``DMG_DOMAINBED_DISABLE`` is set to anything but empty, ``0``, ``false``, ``no`` or ``off``.
"""

import os
import sys

DISABLE_VARIABLE = "DMG_DOMAINBED_DISABLE"
#: Values of ``DMG_DOMAINBED_DISABLE`` that count as unset (compared lower-case, stripped).
NOT_SET_VALUES = frozenset({"", "0", "false", "no", "off"})
WATCHED_MODULES = frozenset(
    {
        "domainbed.algorithms",
        "domainbed.hparams_registry",
        "domainbed.datasets",
        "domainbed.command_launchers",
    }
)


def disabled() -> bool:
    """Whether ``DMG_DOMAINBED_DISABLE`` switches the hook off in this environment."""
    return os.environ.get(DISABLE_VARIABLE, "").strip().lower() not in NOT_SET_VALUES


def _report(message: str) -> None:
    """Hand a problem to :func:`dmg_domainbed.errors.report_once`, imported only when there is
    one (it is stdlib only, but the hook loads nothing a process does not need)."""
    try:
        from dmg_domainbed.errors import report_once

        report_once(message)
    except Exception:
        pass


def _after_import(module) -> None:
    try:
        from dmg_domainbed import integration

        integration.register_into(module)
    except Exception as error:  # a plugin problem must never stop DomainBed itself
        _report(
            f"could not register plugins into {module.__name__}: "
            f"{type(error).__name__}: {error}. DomainBed's own algorithms still work; "
            f"set {DISABLE_VARIABLE}=1 to silence this."
        )


class _RegisteringLoader:
    """Wraps a module's real loader and registers the plugins once the module has run.

    The import system calls only ``create_module`` and ``exec_module``; anything else (e.g.
    ``get_source`` for tracebacks) goes to the real loader.
    """

    def __init__(self, loader) -> None:
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        _after_import(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class DomainBedImportWatcher:
    """A meta-path finder: finds the watched DomainBed modules with the other finders and wraps
    their loaders."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in WATCHED_MODULES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _RegisteringLoader(spec.loader)
        return spec


def install() -> None:
    """Put the import watcher in front of ``sys.meta_path`` (once); never raises."""
    try:
        if disabled():
            return
        if any(type(f).__name__ == DomainBedImportWatcher.__name__ for f in sys.meta_path):
            return
        sys.meta_path.insert(0, DomainBedImportWatcher())
        # A DomainBed module imported before the hook (e.g. install() called late) is
        # registered right away.
        for name in WATCHED_MODULES & set(sys.modules):
            _after_import(sys.modules[name])
    except Exception as error:
        _report(f"start-up hook failed: {type(error).__name__}: {error}")
