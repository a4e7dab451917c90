"""The one place that writes into DomainBed: every name it changes, why, and what others see.

DomainBed has no plugin API: its registries are module globals, one hparams function and a
launcher dict. The table names everything the start-up hook (:mod:`dmg_domainbed._startup`)
writes or wraps once DomainBed is imported (``algorithms.X`` is ``domainbed.algorithms.X``):
what the package **does**, **why**, and what a run that uses nothing of the package sees
(**others**: DomainBed's ERM on PACS keeps exactly DomainBed's hparams, data and model).
``<plugin>`` is an entry point's name, ``<manifest>`` a name in a manifest of
``DMG_DOMAINBED_DATASETS``, ``<dataset>`` a subclass of ``MultipleDomainDataset``.
``tests/test_integration.py`` compares the first column with what registration changes.

====================================== =========================================================
name                                   what the package does, why, and what others see
====================================== =========================================================
algorithms.ALGORITHMS                  **does** appends the plugins' names. **why** ``sweep``'s
                                       default ``--algorithms``. **others** DomainBed's first.
algorithms.<plugin>                    **does** the plugin's class. **why** the lookup reads the
                                       globals. **others** DomainBed's names keep its classes.
algorithms.get_algorithm_class         **does** wrapped: loads the plugin asked for first
                                       (:class:`PluginImportError` with its traceback if it
                                       cannot). **why** a plugin imported before DomainBed.
                                       **others** DomainBed's lookup and errors.
algorithms.__getattr__                 **does** added: loads a missing plugin's name. **why**
                                       ``from domainbed.algorithms import DMG`` in that case.
                                       **others** asked only for names the module lacks.
algorithms.Algorithm.__init__          **does** wrapped: refuses an hparam name nothing of the
                                       run reads (:mod:`~dmg_domainbed.hparams.names`) and
                                       train.py's ``--test_envs`` out of range, then applies
                                       ``precision`` and ``averaging``. **why** every algorithm
                                       calls it first; DomainBed ignores a misspelt name.
                                       **others** fp32, unaveraged; a bad name is a ``UserError``.
datasets.DATASETS                      **does** appends the plugins' and manifests' names.
                                       **why** ``sweep``'s default ``--datasets``.
                                       **others** DomainBed's first.
datasets.<plugin>                      as ``algorithms.<plugin>`` (train.py reads
                                       ``vars(datasets)``).
datasets.<manifest>                    **does** the manifest's dataset class, only with
                                       ``DMG_DOMAINBED_DATASETS`` set. **why** a dataset
                                       without code. **others** a taken name is refused.
datasets.get_dataset_class             as ``algorithms.get_algorithm_class``.
datasets.__getattr__                   as ``algorithms.__getattr__``.
datasets.<dataset>.N_WORKERS           **does** caps the loader workers, only with
                                       ``DMG_DOMAINBED_LOADER_WORKERS`` set
                                       (:func:`cap_loader_workers`). **why** parallel jobs.
                                       **others** DomainBed's numbers.
hparams_registry._hparams              **does** wrapped: adds the plugin dataset's and
                                       algorithm's ``HPARAMS``; in train.py first refuses
                                       ``--test_envs`` out of range. **why** looked up at each
                                       call; train.py asks before it reads data. **others**
                                       exactly DomainBed's dicts.
command_launchers.REGISTRY             **does** adds each plugin launcher whose name is free.
                                       **why** ``--command_launcher``. **others** unchanged.
sys.meta_path                          **does** the start-up hook's finder, first; it registers
                                       the four modules. **why** every sweep job is a fresh
                                       ``train.py``. **others** 0.5 ms at start-up.
sys.excepthook                         **does** wrapped (:func:`end_scripts_with_user_message`).
                                       **why** a ``UserError`` ending DomainBed's scripts prints
                                       its message alone. **others** as before.
====================================== =========================================================

With ``DMG_DOMAINBED_DISABLE=1`` nothing is written unless a program calls
:func:`dmg_domainbed.register` (the ``dmg-domainbed`` commands do), which writes all but
``sys.meta_path``. Which modules are registered is kept here (``_registered``).

Entry-point groups, one per registry: ``domainbed.algorithms`` (an ``Algorithm`` subclass,
optional ``HPARAMS``), ``domainbed.datasets`` (a ``MultipleDomainDataset`` subclass, optional
``HPARAMS`` and ``recorded_hparams()``: :mod:`dmg_domainbed.datasets.when_built`) and
``domainbed.command_launchers`` (``launcher(commands: list[str])``). ``HPARAMS`` is an
:class:`~dmg_domainbed.hparams.HParamSpace` or ``{name: (default, sampler)}``; dataset hparams
come first, the algorithm's last. A broken entry point is reported once on stderr and skipped;
one whose module was still being imported is tried again at each lookup (see :func:`load`).
"""

from __future__ import annotations

import functools
import os
import re
import sys
import traceback
import weakref
from collections.abc import Container
from importlib import metadata
from types import ModuleType
from typing import Any

from dmg_domainbed.errors import SCRIPT_ERROR_PREFIX, UserError, report_once
from dmg_domainbed.rules import with_article

ALGORITHM_GROUP = "domainbed.algorithms"
DATASET_GROUP = "domainbed.datasets"
LAUNCHER_GROUP = "domainbed.command_launchers"
# Marks this package's own wrappers (of ``Algorithm.__init__``, of ``sys.excepthook``).
_MARK = "__dmg_domainbed_registered__"
LOADER_WORKERS_VARIABLE = "DMG_DOMAINBED_LOADER_WORKERS"
SCRIPTS = "domainbed.scripts."  # DomainBed's scripts' modules


#: The distribution whose entry points name this package's own components.
OWN_DISTRIBUTION = "dmg-domainbed"


def _package(entry_point: metadata.EntryPoint) -> str:
    """The name of the distribution that declares ``entry_point``."""
    return getattr(getattr(entry_point, "dist", None), "name", None) or "an installed package"


def _distribution(entry_point: metadata.EntryPoint) -> str:
    """The name of the distribution that declares ``entry_point``, normalised (PEP 503) as pip
    names it."""
    return re.sub(r"[-_.]+", "-", _package(entry_point)).lower()


def _own(entry_point: metadata.EntryPoint) -> bool:
    """Whether this package declares ``entry_point``."""
    return _distribution(entry_point) == OWN_DISTRIBUTION


@functools.cache
def entry_points(group: str) -> dict[str, metadata.EntryPoint]:
    """The installed entry points of ``group`` by name: a name this package claims stays its
    own wherever another stands on ``sys.path``; one two others claim keeps the first. Each
    refused entry point is reported once."""
    found: dict[str, metadata.EntryPoint] = {}
    for entry_point in metadata.entry_points(group=group):
        name = entry_point.name
        kept = found.setdefault(name, entry_point)
        if kept is entry_point or kept.value == entry_point.value:
            continue
        refused = entry_point  # the later of two claims, unless it is this package's own
        if _own(refused):
            found[name], kept, refused = refused, refused, kept
        other = _distribution(refused)
        report_once(
            f"entry point '{name} = {refused.value}' of group '{group}' (from {other}) is not "
            f"registered: '{name}' is {OWN_DISTRIBUTION}'s own ('{kept.value}'), which every "
            f"command keeps. Rename the entry point in {other}."
            if _own(kept)
            else f"entry point '{name}' of group '{group}' is declared twice ('{kept.value}' "
            f"from {_distribution(kept)} and '{refused.value}' from {other}); using the first. "
            "Uninstall one of the two packages."
        )
    return found


# What each entry point loaded, for good: its object, or None after a failure that is final.
_loaded: dict[tuple[str, str], Any | None] = {}
# The exception each entry point that could not be loaded raised last, with its traceback.
_failures: dict[tuple[str, str], BaseException] = {}
# Entry points whose last failure may only mean "not yet" (see load): listed, not reported.
_not_yet: set[tuple[str, str]] = set()
# Entry points whose failures the caller that asked for them shows (see load).
_shown_by_caller: set[tuple[str, str]] = set()
# Entry points whose load is under way: importing the plugin may import DomainBed, whose
# registration asks for the same entry point again.
_loading: set[tuple[str, str]] = set()


class PluginImportError(ImportError):
    """A plugin that was asked for by name could not be imported; the message holds the
    plugin's own traceback."""


def load(group: str, name: str, report: bool = True) -> Any | None:
    """Load one entry point; a failure is reported once (unless ``report`` is false: the
    caller shows it, from then on) and gives ``None``.

    A plugin that imports DomainBed, imported first, has DomainBed registered half-way through
    its own import. What was in ``sys.modules`` before the load tells such a failure: an entry
    point being loaded already gives ``None``; an ``ImportError`` or ``AttributeError`` naming
    what is missing from a module imported before (the entry point's, or ``M`` of a ``from M
    import X``) is "not yet": listed, not reported, tried at each lookup (:func:`require`
    raises it if it persists); any other such error while the plugin's top-level package was
    imported before is reported and tried again; any other failure is reported and final.
    """
    key = (group, name)
    if not report:
        _shown_by_caller.add(key)
    if key in _loaded:
        return _loaded[key]
    if key in _loading:
        return None
    entry_point = entry_points(group)[name]
    imported_before = set(sys.modules)
    _loading.add(key)
    try:
        obj = entry_point.load()
    except Exception as error:
        _failures[key] = error
        retry = isinstance(error, (ImportError, AttributeError)) and (
            entry_point.module.partition(".")[0] in imported_before
        )
        # The module a name is missing from: the entry point's for its attribute, ``M`` of a
        # ``from M import X`` (a ModuleNotFoundError names the module that is missing).
        missing_from = (
            entry_point.module
            if isinstance(error, AttributeError)
            else getattr(error, "name", None)
        )
        if retry and missing_from in imported_before:
            _not_yet.add(key)
            return None
        _not_yet.discard(key)
        if key not in _shown_by_caller:
            report_once(
                f"skipping DomainBed plugin '{name} = {entry_point.value}' (group '{group}', "
                f"from {_package(entry_point)}): {type(error).__name__}: {error}. DomainBed and "
                f"the other plugins still work; fix or uninstall {_package(entry_point)} to use "
                f"'{name}'."
            )
        if not retry:
            _loaded[key] = None
        return None
    finally:
        _loading.discard(key)
    _failures.pop(key, None)
    _not_yet.discard(key)
    _loaded[key] = obj
    return obj


def require(group: str, name: str) -> Any | None:
    """The plugin ``name`` of ``group``, for a caller that asked for it by name: ``None`` if no
    installed package declares it (or its entry point is being loaded: asked for from inside
    it), :class:`PluginImportError` with the plugin's traceback if its entry point cannot be
    loaded, after one more try."""
    if name not in entry_points(group):
        return None
    obj = load(group, name)
    error = _failures.get((group, name))
    if obj is not None or error is None or (group, name) in _loading:
        return obj
    entry_point = entry_points(group)[name]
    dist = _package(entry_point)
    trace = "".join(traceback.format_exception(error)).rstrip()
    raise PluginImportError(
        f"DomainBed plugin '{name}' ('{entry_point.value}', group '{group}', from {dist}) "
        f"cannot be imported:\n\n{trace}\n\nFix {dist} (the traceback above ends where the "
        f"error is), or uninstall it, to use '{name}'."
    )


def _open_namespace(module: ModuleType, names: str, group: str, what: str, lookup: str) -> None:
    """Put every plugin of ``group`` into ``module``'s globals and its list ``names``; a plugin
    whose module is still being imported (it imported DomainBed, which triggered this) gets its
    name listed now and its object filled in on a later lookup (see :func:`load`). DomainBed's
    ``lookup`` and a module ``__getattr__`` (an attribute access never calls the lookup, which
    reads ``globals()``) first load the plugin asked for: a late one is filled in, a broken one
    raises :class:`PluginImportError`."""

    def complete() -> None:
        listed = getattr(module, names)
        for name in entry_points(group):
            obj, existing = load(group, name), module.__dict__.get(name)
            if obj is not None and existing is not None and existing is not obj:
                report_once(
                    f"plugin {what} '{name}' (group '{group}') is not registered: DomainBed "
                    f"already has {with_article(what)} of that name. Rename the entry point."
                )
                continue
            if obj is not None:
                module.__dict__[name] = obj
            late = (group, name) in _not_yet or (group, name) in _loading
            if (obj is not None or late) and name not in listed:
                listed.append(name)

    complete()
    domainbed_lookup = getattr(module, lookup)

    @functools.wraps(domainbed_lookup)
    def lookup_with_plugins(name: str):
        complete()
        require(group, name)
        return domainbed_lookup(name)

    def module_getattr(name: str):
        if name in entry_points(group):
            complete()
            require(group, name)
            if name in module.__dict__:
                return module.__dict__[name]
        raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

    setattr(module, lookup, lookup_with_plugins)
    module.__getattr__ = module_getattr


def register_algorithms(module: ModuleType) -> None:
    """Register the plugin algorithms, and wrap ``Algorithm.__init__``, which every algorithm
    calls before it builds anything: refuse hparam names the run does not read (on
    ``train.py``'s dataset, else any), then apply ``init_seed``, ``precision`` and
    ``averaging`` (each does nothing unless asked)."""
    from dmg_domainbed import averaging, precision
    from dmg_domainbed.hparams.names import reject_unknown

    _open_namespace(module, "ALGORITHMS", ALGORITHM_GROUP, "algorithm", "get_algorithm_class")
    domainbed_init = module.Algorithm.__init__
    if getattr(domainbed_init, _MARK, False):
        return

    @functools.wraps(domainbed_init)
    def __init__(self, input_shape, num_classes, num_domains, hparams):
        reject_unknown(type(self), hparams, train_dataset(), input_shape)
        domainbed_init(self, input_shape, num_classes, num_domains, hparams)
        averaging.seed_initialisation(self, hparams)
        precision.apply(self, hparams)
        averaging.apply(self, hparams)

    setattr(__init__, _MARK, True)
    module.Algorithm.__init__ = __init__


def train_dataset() -> type | None:
    """The class of ``train.py``'s ``--dataset`` when this process runs ``train.py``, its
    ``--test_envs`` checked (DomainBed's datasets check none); else ``None``."""
    from dmg_domainbed.datasets.training_split import train_arguments
    from dmg_domainbed.datasets.when_built import check_test_envs

    args = train_arguments()
    if args is None:
        return None
    from domainbed import datasets

    dataset_class = vars(datasets).get(getattr(args, "dataset", None))
    check_test_envs(dataset_class, getattr(args, "test_envs", None))
    return dataset_class


def register_datasets(module: ModuleType) -> None:
    _open_namespace(module, "DATASETS", DATASET_GROUP, "dataset", "get_dataset_class")
    register_manifest_datasets(module)
    cap_loader_workers(module)


def register_manifest_datasets(module: ModuleType, environ=os.environ) -> list[str]:
    """Register the dataset of every manifest ``DMG_DOMAINBED_DATASETS`` names and return
    their names; one that cannot be used, or whose name is taken, is reported and skipped."""
    from dmg_domainbed.datasets.manifest import MANIFESTS_VARIABLE, read_manifests

    if not environ.get(MANIFESTS_VARIABLE, "").strip():
        return []
    from dmg_domainbed.datasets.manifest_dataset import dataset_class

    manifests, problems = read_manifests(environ)
    for problem in problems:
        report_once(f"{problem}. It is not registered.")
    registered = []
    for manifest in manifests:
        if (refusal := manifest_refusal(module, manifest)) is not None:
            report_once(refusal)
            continue
        module.__dict__[manifest.name] = dataset_class(manifest)
        if manifest.name not in module.DATASETS:
            module.DATASETS.append(manifest.name)
        registered.append(manifest.name)
    return registered


def manifest_refusal(module: ModuleType, manifest) -> str | None:
    """Why ``manifest``'s dataset cannot be registered into ``module`` (domainbed.datasets):
    its name is taken by DomainBed, a plugin or another manifest; ``None`` if it can (or is)."""
    existing = module.__dict__.get(manifest.name)
    taken = existing is not None and getattr(existing, "MANIFEST", None) != manifest
    if taken or manifest.name in entry_points(DATASET_GROUP):
        return (
            f"dataset manifest {manifest.path}: name {manifest.name!r} is taken by DomainBed or "
            "a plugin: it is not registered. Give the manifest another name."
        )
    return None


# Each dataset class's N_WORKERS as its class body defines it (None where it inherits it).
_defined_loader_workers: dict[type, int | None] = {}


def _subclasses(cls: type) -> list[type]:
    return [c for sub in cls.__subclasses__() for c in (sub, *_subclasses(sub))]


def cap_loader_workers(module: ModuleType, environ=os.environ) -> None:
    """Cap the data-loader workers of every class of ``domainbed.datasets``' family.

    ``train.py`` gives each loader (one per source domain, all prefetching at once)
    ``dataset.N_WORKERS`` workers. ``DMG_DOMAINBED_LOADER_WORKERS=N`` is a budget per job: a
    dataset of ``E`` domains gets ``max(1, N // (E - 1))`` per loader, never more than its own
    number and never 0 where that is not 0 (0 would change augmentation's random stream).
    Every class first gets its own number back, so that unset it is DomainBed's. Called at
    registration and again by a forked job with its own environment. A value that is not a
    whole number is reported once and ignored (launchers reject it before any job starts).
    """
    text = environ.get(LOADER_WORKERS_VARIABLE, "").strip()
    if text and not text.isdigit():
        report_once(
            f"{LOADER_WORKERS_VARIABLE}={text!r} is not a whole number >= 0: ignored, "
            "DomainBed's own data-loader workers are used. Fix or unset the variable."
        )
    classes = _subclasses(module.MultipleDomainDataset)
    for cls in classes:
        defined = _defined_loader_workers.setdefault(cls, vars(cls).get("N_WORKERS"))
        if defined is not None:
            cls.N_WORKERS = defined
        elif "N_WORKERS" in vars(cls):
            del cls.N_WORKERS
    own = {cls: getattr(cls, "N_WORKERS", 0) for cls in classes}
    for cls, workers in own.items():
        domains = len(getattr(cls, "ENVIRONMENTS", None) or ())
        if text.isdigit() and workers and domains >= 2:
            cls.N_WORKERS = min(workers, max(1, int(text) // (domains - 1)))


def register_launchers(module: ModuleType) -> None:
    for name in entry_points(LAUNCHER_GROUP):
        if (launcher := load(LAUNCHER_GROUP, name)) is not None:
            module.REGISTRY.setdefault(name, launcher)


def plugin_hparams(
    group: str, name: str, random_seed: int, dataset: str, defined: Container[str]
) -> dict[str, tuple[Any, Any]]:
    """(default, random) of the hparams that plugin ``name`` of ``group`` declares for runs on
    ``dataset``, given the names already ``defined``."""
    space = getattr(require(group, name), "HPARAMS", None)
    if space is None:
        return {}
    from domainbed.lib import misc

    from dmg_domainbed.hparams import resolve_space

    return resolve_space(space, random_seed, misc.seed_hash, dataset, defined)


def register_hparams(module: ModuleType) -> None:
    """Wrap ``_hparams`` (looked up at each call) so plugin datasets and algorithms add their
    declared hparams, and ``train.py``'s ``--test_envs`` are checked before it reads data."""
    domainbed_hparams = module._hparams

    @functools.wraps(domainbed_hparams)
    def _hparams(algorithm: str, dataset: str, random_seed: int) -> dict[str, tuple[Any, Any]]:
        train_dataset()  # train.py asks for hparams before it builds the dataset
        hparams = domainbed_hparams(algorithm, dataset, random_seed)
        hparams.update(plugin_hparams(DATASET_GROUP, dataset, random_seed, dataset, hparams))
        hparams.update(plugin_hparams(ALGORITHM_GROUP, algorithm, random_seed, dataset, hparams))
        return hparams

    module._hparams = _hparams


def domainbed_hparams(algorithm: str, dataset: str, random_seed: int) -> dict[str, tuple]:
    """(default, random) of the hparams DomainBed's own registry gives ``algorithm`` on
    ``dataset``, without any plugin's declarations."""
    from domainbed import hparams_registry

    own = getattr(hparams_registry._hparams, "__wrapped__", hparams_registry._hparams)
    return own(algorithm, dataset, random_seed)


# Each registrar, and the module attribute it replaces: DomainBed's code defines that attribute
# afresh when it runs again (``importlib.reload``), which tells a reloaded module from a
# registered one.
_REGISTRARS = {
    "domainbed.algorithms": (register_algorithms, "get_algorithm_class"),
    "domainbed.datasets": (register_datasets, "get_dataset_class"),
    "domainbed.hparams_registry": (register_hparams, "_hparams"),
    "domainbed.command_launchers": (register_launchers, "REGISTRY"),
}


def _through_domainbed_script(trace) -> bool:
    """Whether a traceback passes through the top level of one of DomainBed's scripts run as
    the program: ``python -m domainbed.scripts.NAME``, or a warm job of ``local_parallel``,
    which runs ``train`` as ``__main__`` too."""
    return any(
        frame.f_globals.get("__name__") == "__main__"
        and (getattr(frame.f_globals.get("__spec__"), "name", "") or "").startswith(SCRIPTS)
        for frame, _ in traceback.walk_tb(trace)
    )


def end_scripts_with_user_message() -> None:
    """Have a :class:`UserError` that ends one of DomainBed's scripts print
    ``dmg-domainbed: error: MESSAGE`` alone on stderr (``train.py`` copies it into
    ``err.txt``), exit status 1; anything else goes to the hook that was there before."""
    previous = sys.excepthook
    if getattr(previous, _MARK, False):
        return

    def excepthook(kind, error, trace):
        if issubclass(kind, UserError) and _through_domainbed_script(trace):
            print(f"{SCRIPT_ERROR_PREFIX}{error}", file=sys.stderr, flush=True)
        else:
            previous(kind, error, trace)

    setattr(excepthook, _MARK, True)
    sys.excepthook = excepthook


# Each registered DomainBed module, and the value of its registrar's attribute once registered.
_registered: weakref.WeakKeyDictionary[ModuleType, Any] = weakref.WeakKeyDictionary()


def register_into(module: ModuleType) -> None:
    """Register every plugin into one DomainBed module, unless it is registered already (a
    module ``importlib.reload`` ran again has DomainBed's own lists and lookups back)."""
    registrar, replaced = _REGISTRARS.get(module.__name__, (None, ""))
    if registrar is None or _registered.get(module) is getattr(module, replaced):
        return
    end_scripts_with_user_message()
    registrar(module)
    _registered[module] = getattr(module, replaced)


def register_all() -> None:
    """Import DomainBed's library modules and register into each of them."""
    import importlib

    for name in _REGISTRARS:
        register_into(importlib.import_module(name))
