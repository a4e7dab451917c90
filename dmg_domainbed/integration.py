"""The one place that writes into DomainBed's modules.

DomainBed has no plugin API: ``get_algorithm_class`` looks names up in the globals of
``domainbed.algorithms``, hyperparameters come from one function (``hparams_registry._hparams``),
datasets from the globals of ``domainbed.datasets`` and launchers from
``command_launchers.REGISTRY``. This module opens each of them to Python entry points, one
group per registry, so that any installed package can add components without editing DomainBed:

=============================== ====================================================
entry-point group               object the entry point names
=============================== ====================================================
``domainbed.algorithms``        an ``Algorithm`` subclass, optional ``HPARAMS``
``domainbed.datasets``          a ``MultipleDomainDataset`` subclass, optional ``HPARAMS``
                                and ``recorded_hparams()``
``domainbed.command_launchers`` a function ``launcher(commands: list[str])``
=============================== ====================================================

``HPARAMS`` is an :class:`~dmg_domainbed.hparams.HParamSpace` or a mapping
``{name: (default, sampler)}``. Dataset hparams apply to every algorithm run on that dataset;
algorithm hparams come last. DomainBed's own algorithms on DomainBed's own datasets get exactly
the hparams they get without plugins. This package's algorithms are registered through the same
groups. A broken entry point is reported once on stderr and skipped.

The ``precision`` hparam (:mod:`dmg_domainbed.precision`) is applied here to every algorithm
DomainBed builds, its own included (see :func:`register_precision`).

Two settings are applied here too, because they write into DomainBed's datasets:
``DMG_DOMAINBED_DATASETS`` registers the datasets of manifest files (see
:func:`register_manifest_datasets`) and ``DMG_DOMAINBED_LOADER_WORKERS`` caps data-loader
workers (see :func:`cap_loader_workers`).
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
from collections.abc import Container
from importlib import metadata
from types import ModuleType
from typing import Any

from dmg_domainbed.errors import UserError, report_once

ALGORITHM_GROUP = "domainbed.algorithms"
DATASET_GROUP = "domainbed.datasets"
LAUNCHER_GROUP = "domainbed.command_launchers"
_MARK = "__dmg_domainbed_registered__"
LOADER_WORKERS_VARIABLE = "DMG_DOMAINBED_LOADER_WORKERS"


@functools.cache
def entry_points(group: str) -> dict[str, metadata.EntryPoint]:
    """The installed entry points of ``group`` by name; a name claimed twice keeps the first."""
    found: dict[str, metadata.EntryPoint] = {}
    for entry_point in metadata.entry_points(group=group):
        if entry_point.name in found and found[entry_point.name].value != entry_point.value:
            report_once(
                f"entry point '{entry_point.name}' of group '{group}' is declared twice "
                f"('{found[entry_point.name].value}' and '{entry_point.value}'); "
                "using the first. Uninstall one of the two packages."
            )
            continue
        found.setdefault(entry_point.name, entry_point)
    return found


_loaded: dict[tuple[str, str], Any | None] = {}
# The exception each entry point that could not be loaded raised, with its traceback.
_failures: dict[tuple[str, str], BaseException] = {}
# Entry points whose load is under way: importing the plugin may import DomainBed, whose
# registration asks for the same entry point again.
_loading: set[tuple[str, str]] = set()


class PluginImportError(ImportError):
    """A plugin that was asked for by name could not be imported; the message holds the
    plugin's own traceback."""


def _running_top_level_code(module_name: str) -> bool:
    """True while a module of ``module_name``'s top-level package is half-way through its import:
    a frame running its top-level code (``<module>``) is on the call stack."""
    import inspect

    package = module_name.partition(".")[0]
    frame = inspect.currentframe()
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if frame.f_code.co_name == "<module>" and (
            name == package or name.startswith(f"{package}.")
        ):
            return True
        frame = frame.f_back
    return False


def load(group: str, name: str) -> Any | None:
    """Load one entry point; a failure is reported once and gives ``None``.

    A plugin module that imports DomainBed triggers registration while it (or a module of its
    package) is still being imported; its entry point then gives ``None`` for now, unreported. An
    ``ImportError`` or ``AttributeError`` raised while the plugin's package was already imported
    (perhaps half-way) is not kept as final: a later call tries again.
    """
    key = (group, name)
    if key in _loaded:
        return _loaded[key]
    if key in _loading:
        return None
    entry_point = entry_points(group)[name]
    package_imported = entry_point.module.partition(".")[0] in sys.modules
    _loading.add(key)
    try:
        obj = entry_point.load()
    except Exception as error:
        retry = package_imported and isinstance(error, (ImportError, AttributeError))
        return _failed(key, entry_point, error, retry)
    finally:
        _loading.discard(key)
    _failures.pop(key, None)
    _loaded[key] = obj
    return obj


def _failed(key: tuple[str, str], entry_point, error: Exception, retry: bool) -> None:
    """Record and report a failed load; kept as final unless ``retry``."""
    if retry and _running_top_level_code(entry_point.module):
        _failures.pop(key, None)  # half-way through its own import: not a failure yet
        return None
    _failures[key] = error
    group, name = key
    dist = getattr(entry_point.dist, "name", "an installed package")
    report_once(
        f"skipping DomainBed plugin '{name} = {entry_point.value}' (group '{group}', "
        f"from {dist}): {type(error).__name__}: {error}. DomainBed and the other plugins "
        f"still work; fix or uninstall {dist} to use '{name}'."
    )
    if not retry:
        _loaded[key] = None
    return None


def require(group: str, name: str) -> Any | None:
    """The plugin ``name`` of ``group``, for a caller that asked for it by name: ``None`` if no
    installed package declares it (or it is still being imported), :class:`PluginImportError`
    with the plugin's traceback if its entry point cannot be loaded, after one more try."""
    if name not in entry_points(group):
        return None
    obj = load(group, name)
    if obj is not None:
        return obj
    if (group, name) not in _failures:  # still being imported: asked for from inside it
        return None
    error = _failures[(group, name)]
    entry_point = entry_points(group)[name]
    dist = getattr(entry_point.dist, "name", "an installed package")
    trace = "".join(traceback.format_exception(error)).rstrip()
    raise PluginImportError(
        f"DomainBed plugin '{name}' ('{entry_point.value}', group '{group}', from {dist}) "
        f"cannot be imported:\n\n{trace}\n\nFix {dist} (the traceback above ends where the "
        f"error is), or uninstall it, to use '{name}'."
    )


def plugins(group: str) -> dict[str, Any]:
    """Every loadable plugin of ``group`` by name."""
    loaded = {name: load(group, name) for name in entry_points(group)}
    return {name: obj for name, obj in loaded.items() if obj is not None}


def _add_to_namespace(module: ModuleType, names: list[str], group: str, what: str) -> None:
    """Put every plugin of ``group`` into ``module``'s globals and its list of ``names``.

    A plugin whose module is still being imported (it imported DomainBed, which triggered this)
    gets its name listed now and its object filled in on first lookup.
    """
    for name in entry_points(group):
        obj = load(group, name)
        if obj is None:
            late = (group, name) not in _loaded and (group, name) not in _failures
            if late and name not in names:
                names.append(name)
            continue
        existing = module.__dict__.get(name)
        if existing is not None and existing is not obj:
            report_once(
                f"plugin {what} '{name}' (group '{group}') is not registered: DomainBed "
                f"already has a {what} of that name. Rename the entry point."
            )
            continue
        module.__dict__[name] = obj
        if name not in names:
            names.append(name)


def _open_namespace(module: ModuleType, names: str, group: str, what: str, lookup: str) -> None:
    """Register ``group`` into ``module`` and complete late plugins on every lookup."""

    def complete() -> None:
        _add_to_namespace(module, getattr(module, names), group, what)

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
    _open_namespace(module, "ALGORITHMS", ALGORITHM_GROUP, "algorithm", "get_algorithm_class")
    register_precision(module)


def register_precision(module: ModuleType) -> None:
    """Apply the ``precision`` hparam to every algorithm built from ``module.Algorithm``.

    DomainBed's algorithms and every plugin's call ``Algorithm.__init__`` first; after it,
    :func:`dmg_domainbed.precision.apply` runs their ``update`` and ``predict`` under bf16
    autocast when the hparams say ``"bf16"`` and does nothing otherwise.
    """
    from dmg_domainbed import precision

    domainbed_init = module.Algorithm.__init__
    if getattr(domainbed_init, _MARK, False):
        return

    @functools.wraps(domainbed_init)
    def __init__(self, input_shape, num_classes, num_domains, hparams):
        domainbed_init(self, input_shape, num_classes, num_domains, hparams)
        precision.apply(self, hparams)

    setattr(__init__, _MARK, True)
    module.Algorithm.__init__ = __init__


def register_datasets(module: ModuleType) -> None:
    _open_namespace(module, "DATASETS", DATASET_GROUP, "dataset", "get_dataset_class")
    register_manifest_datasets(module)
    cap_loader_workers(module)
    check_and_record_when_built(module.MultipleDomainDataset)


def check_test_envs(dataset_class: type, test_envs) -> None:
    """Raise :class:`UserError` unless ``test_envs`` are distinct domain numbers of
    ``dataset_class`` that leave at least one domain to train on.

    DomainBed's ``train.py`` does not check them: an out-of-range test environment trains on
    every domain while the algorithm is built for one domain fewer, and fails later in the
    algorithm (an ``IndexError`` in a per-domain layer), far from its cause.
    """
    environments = list(getattr(dataset_class, "ENVIRONMENTS", None) or ())
    if not environments or test_envs is None:
        return
    name, count = dataset_class.__name__, len(environments)
    domains = ", ".join(f"{i}: {env!r}" for i, env in enumerate(environments))
    given = " ".join(str(env) for env in test_envs)
    allowed = f"{name} has {count} domains ({domains}): test_envs are numbers 0 to {count - 1}"
    fix = (
        f"Give --test_envs between 0 and {count - 1} (--test_envs 0 tests on {environments[0]!r})."
    )
    for env in test_envs:
        if isinstance(env, bool) or not isinstance(env, int) or not 0 <= env < count:
            raise UserError(f"test environment {env!r} (--test_envs {given}): {allowed}. {fix}")
    if len(set(test_envs)) != len(test_envs):
        raise UserError(f"--test_envs {given} names a domain twice: {allowed}, each once. {fix}")
    if len(test_envs) >= count:
        raise UserError(f"--test_envs {given} leaves no domain to train on: {allowed}. {fix}")


def check_and_record_when_built(base: type) -> None:
    """Have every dataset of DomainBed's family check its ``test_envs`` (:func:`check_test_envs`)
    before it reads any data, and write what it records into the run's hparams
    (:func:`dmg_domainbed.hparams.recorded.record`): DomainBed builds a dataset as
    ``cls(root, test_envs, hparams)``, so ``__new__`` of their common base sees them first,
    whatever the algorithm. Unpickling (``cls.__new__(cls)``, in data-loader workers) passes
    nothing and is not checked."""
    from dmg_domainbed.hparams.recorded import record

    def __new__(cls, *args, **kwargs):
        test_envs = args[1] if len(args) > 1 else kwargs.get("test_envs")
        hparams = args[2] if len(args) > 2 else kwargs.get("hparams")
        check_test_envs(cls, test_envs)
        if hparams is not None:
            record(cls, hparams)
        return object.__new__(cls)

    base.__new__ = staticmethod(__new__)


def register_manifest_datasets(module: ModuleType, environ=os.environ) -> list[str]:
    """Register the dataset of every manifest ``DMG_DOMAINBED_DATASETS`` names (see
    :mod:`dmg_domainbed.datasets.manifest`) and return their names.

    A manifest that cannot be used, or whose name DomainBed or a plugin already uses, is
    reported once on stderr and skipped. With the variable unset, nothing is read.
    """
    from dmg_domainbed.datasets.manifest import MANIFESTS_VARIABLE, read_manifests

    if not environ.get(MANIFESTS_VARIABLE, "").strip():
        return []
    from dmg_domainbed.datasets.manifest_dataset import dataset_class

    manifests, problems = read_manifests(environ)
    for problem in problems:
        report_once(f"{problem}. It is not registered.")
    registered = []
    for manifest in manifests:
        refusal = manifest_refusal(module, manifest)
        if refusal is not None:
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


# Each dataset class's own N_WORKERS, as it was before any cap, to cap it again from there.
_own_loader_workers: dict[type, int] = {}


def _subclasses(cls: type) -> list[type]:
    found = []
    for subclass in cls.__subclasses__():
        found += [subclass, *_subclasses(subclass)]
    return found


def _own_workers(cls: type) -> int:
    """``cls.N_WORKERS`` as the class hierarchy defines it, before any cap."""
    for klass in cls.__mro__:
        if klass in _own_loader_workers:
            return _own_loader_workers[klass]
        if "N_WORKERS" in vars(klass):
            return vars(klass)["N_WORKERS"]
    return 0


def loader_workers_budget(environ=os.environ) -> int | None:
    """The value of ``DMG_DOMAINBED_LOADER_WORKERS``: None if unset; a bad value is reported
    once and ignored (launchers reject it before any job starts)."""
    text = environ.get(LOADER_WORKERS_VARIABLE, "").strip()
    if not text:
        return None
    if not text.isdigit():
        report_once(
            f"{LOADER_WORKERS_VARIABLE}={text!r} is not a whole number >= 0: ignored, "
            "DomainBed's own data-loader workers are used. Fix or unset the variable."
        )
        return None
    return int(text)


def cap_loader_workers(module: ModuleType, environ=os.environ) -> None:
    """Cap the data-loader workers of every dataset class of ``domainbed.datasets``' family.

    DomainBed's ``train.py`` gives each of its loaders ``dataset.N_WORKERS`` worker processes
    (DomainBed's default unless a dataset says otherwise; docs/sweeps.md), with one training
    loader per source domain, all prefetching at once. ``DMG_DOMAINBED_LOADER_WORKERS=N`` is a
    budget per job: each loader of a dataset with ``E`` domains gets ``max(1, N // (E - 1))``
    workers (its ``E - 1`` training loaders together about ``N``, with one test domain), never
    more than the dataset's own number and never 0 where that is not 0 (0 would move
    augmentation into the training process and change its random stream). Unset, every class
    gets its own number back. Called at registration and again by a forked job with its own
    environment.
    """
    budget = loader_workers_budget(environ)
    classes = _subclasses(module.MultipleDomainDataset)
    for cls in classes:
        _own_loader_workers.setdefault(cls, _own_workers(cls))
    for cls in classes:
        own = _own_loader_workers[cls]
        domains = len(getattr(cls, "ENVIRONMENTS", None) or ())
        if budget is None or own == 0 or domains < 2:
            cls.N_WORKERS = own
        else:
            cls.N_WORKERS = min(own, max(1, budget // (domains - 1)))


def register_launchers(module: ModuleType) -> None:
    for name, launcher in plugins(LAUNCHER_GROUP).items():
        module.REGISTRY.setdefault(name, launcher)


def plugin_hparams(
    group: str, name: str, random_seed: int, dataset: str, defined: Container[str]
) -> dict[str, tuple[Any, Any]]:
    """(default, random) of the hparams that plugin ``name`` of ``group`` declares for runs on
    ``dataset``, given the names already ``defined``."""
    component = require(group, name)
    space = getattr(component, "HPARAMS", None)
    if space is None:
        return {}
    from domainbed.lib import misc

    from dmg_domainbed.hparams import resolve_space

    return resolve_space(space, random_seed, misc.seed_hash, dataset, defined)


def register_hparams(module: ModuleType) -> None:
    """Wrap ``_hparams`` so plugin datasets and algorithms add their declared hparams.

    DomainBed's ``default_hparams`` and ``random_hparams`` look ``_hparams`` up in the module at
    call time, so replacing the module attribute is enough.
    """
    domainbed_hparams = module._hparams

    @functools.wraps(domainbed_hparams)
    def _hparams(algorithm: str, dataset: str, random_seed: int) -> dict[str, tuple[Any, Any]]:
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


# Each registrar, and the module attribute it leaves its mark on: DomainBed's code defines that
# attribute afresh when it runs again (``importlib.reload``), which tells a reloaded module from
# a registered one.
_REGISTRARS = {
    "domainbed.algorithms": (register_algorithms, "get_algorithm_class"),
    "domainbed.datasets": (register_datasets, "get_dataset_class"),
    "domainbed.hparams_registry": (register_hparams, "_hparams"),
    "domainbed.command_launchers": (register_launchers, "REGISTRY"),
}


def register_into(module: ModuleType) -> None:
    """Register every plugin into one DomainBed module, unless it is registered already.

    ``importlib.reload`` runs DomainBed's code again in the same module object, which puts
    DomainBed's own lists and lookups back; the start-up hook then registers the module again
    (after an explicit :func:`dmg_domainbed.register`, calling it again does).
    """
    registrar, marked = _REGISTRARS.get(module.__name__, (None, ""))
    if registrar is None or getattr(module, _MARK, None) is getattr(module, marked):
        return
    registrar(module)
    setattr(module, _MARK, getattr(module, marked))


def register_all() -> None:
    """Import DomainBed's library modules and register into each of them."""
    import importlib

    for name in _REGISTRARS:
        register_into(importlib.import_module(name))
