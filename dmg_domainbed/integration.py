"""The one place that writes into DomainBed: every name it changes, why, and what others see.

DomainBed has no plugin API: its registries are module globals, one hparams function and a
launcher dict. The table lists every name the package writes to or wraps, in DomainBed's modules
(``algorithms.X`` is ``domainbed.algorithms.X``) and in the process, as the start-up hook
(:mod:`dmg_domainbed._startup`) leaves them once DomainBed is imported: **does** says what the
package does, **why** why it must, **others** what a run that uses nothing of the package sees
in a process where it is installed (DomainBed's ERM on PACS: exactly DomainBed's hparams, data
and model). ``<plugin>`` is the name of an entry point of the module's group (below),
``<manifest>`` the name in a manifest file of ``DMG_DOMAINBED_DATASETS``, ``<dataset>`` a
class of DomainBed's dataset family (a subclass of ``MultipleDomainDataset``).
``tests/test_integration.py`` holds the table to the code: it imports DomainBed afresh and
compares the names that registration changes with the first column.

====================================== =========================================================
name                                   what the package does, why, and what others see
====================================== =========================================================
algorithms.ALGORITHMS                  **does** appends each plugin algorithm's name.
                                       **why** DomainBed's ``sweep`` takes its default
                                       ``--algorithms`` from this list.
                                       **others** DomainBed's names first, in its order; a
                                       ``sweep`` without ``--algorithms`` also runs the plugins.
algorithms.<plugin>                    **does** the plugin's ``Algorithm`` subclass.
                                       **why** ``get_algorithm_class`` looks names up in the
                                       module's globals.
                                       **others** DomainBed's names keep DomainBed's classes (an
                                       entry point that claims one is refused, on stderr).
algorithms.get_algorithm_class         **does** wrapped: loads the plugin asked for first, and
                                       raises :class:`PluginImportError` with its traceback if
                                       it cannot be imported; then DomainBed's lookup.
                                       **why** a plugin imported before DomainBed gets its class
                                       after registration (see :func:`load`); a broken one
                                       must say why.
                                       **others** DomainBed's lookup and its errors.
algorithms.__getattr__                 **does** added (DomainBed defines none): a plugin's name
                                       missing from the module is loaded as above.
                                       **why** attribute access, ``from domainbed.algorithms
                                       import DMG``, to a plugin imported before DomainBed.
                                       **others** Python asks it only for a name the module
                                       lacks; any other name is an ``AttributeError`` as before.
algorithms.Algorithm.__init__          **does** wrapped: refuses an hparam name that nothing of
                                       the run reads (:mod:`dmg_domainbed.hparams.names`) and,
                                       in ``train.py``, a ``--test_envs`` out of range
                                       (:func:`train_dataset`); runs DomainBed's ``__init__``,
                                       then applies the ``precision`` and ``averaging`` hparams.
                                       **why** every algorithm, DomainBed's and each plugin's,
                                       calls it before building anything; DomainBed's
                                       ``train.py`` trains a misspelt name's default silently,
                                       and on every domain with a test domain out of range.
                                       **others** DomainBed's hparams build as before, in fp32,
                                       unaveraged; a name DomainBed would ignore, or a
                                       ``--test_envs`` out of range, is a ``UserError``.
datasets.DATASETS                      **does** appends each plugin and manifest dataset's name.
                                       **why** DomainBed's ``sweep`` takes its default
                                       ``--datasets`` from this list.
                                       **others** DomainBed's names first, in its order; a
                                       ``sweep`` without ``--datasets`` also runs the plugins'.
datasets.<plugin>                      **does** the plugin's ``MultipleDomainDataset`` subclass.
                                       **why** ``train.py`` looks datasets up in the module's
                                       globals (``vars(datasets)``).
                                       **others** DomainBed's names keep DomainBed's classes.
datasets.<manifest>                    **does** the dataset class built from the manifest
                                       (:func:`register_manifest_datasets`); only with
                                       ``DMG_DOMAINBED_DATASETS`` set.
                                       **why** as for ``<plugin>``: a dataset without code.
                                       **others** a name DomainBed or a plugin has is refused.
datasets.get_dataset_class             **does** wrapped, as ``get_algorithm_class``.
                                       **why** as for ``get_algorithm_class``.
                                       **others** DomainBed's lookup and its errors.
datasets.__getattr__                   **does** added, as ``algorithms.__getattr__``.
                                       **why** as for ``algorithms.__getattr__``.
                                       **others** as for ``algorithms.__getattr__``.
datasets.<dataset>.N_WORKERS           **does** caps the data-loader workers
                                       (:func:`cap_loader_workers`); only with
                                       ``DMG_DOMAINBED_LOADER_WORKERS`` set.
                                       **why** ``train.py`` starts ``N_WORKERS`` workers for
                                       each loader, one loader per domain: too many for
                                       parallel jobs.
                                       **others** DomainBed's numbers when the variable is unset.
hparams_registry._hparams              **does** wrapped: adds the hparams the run's plugin
                                       dataset and plugin algorithm declare (``HPARAMS``); in
                                       ``train.py``, first refuses a ``--test_envs`` out of
                                       range (:func:`train_dataset`).
                                       **why** ``default_hparams`` and ``random_hparams`` look
                                       ``_hparams`` up when called; ``train.py`` asks for the
                                       hparams before it reads any data.
                                       **others** exactly DomainBed's dicts, default and random,
                                       for its algorithms on its datasets; a ``--test_envs``
                                       out of range is a ``UserError``.
command_launchers.REGISTRY             **does** adds each plugin launcher whose name is free.
                                       **why** DomainBed's ``sweep --command_launcher`` looks
                                       launchers up in this dict.
                                       **others** ``local``, ``dummy`` and ``multi_gpu`` as
                                       DomainBed defines them.
sys.meta_path                          **does** the start-up hook puts an import finder first,
                                       which registers each of the four modules once DomainBed
                                       has run it.
                                       **why** DomainBed's ``sweep`` starts every job as a
                                       fresh ``python -m domainbed.scripts.train``.
                                       **others** every other import as before (0.5 ms at
                                       start-up, ``benchmarks/startup_cost.py``).
sys.excepthook                         **does** wraps the hook there at the first registration
                                       (:func:`end_scripts_with_user_message`).
                                       **why** a ``UserError`` that ends one of DomainBed's
                                       scripts is printed as its message alone.
                                       **others** every other exception, and a ``UserError``
                                       that ends a program of one's own, as before.
====================================== =========================================================

With ``DMG_DOMAINBED_DISABLE=1`` the start-up hook is not installed and none of these names is
written, unless a program calls :func:`dmg_domainbed.register` (the ``dmg-domainbed`` commands
do), which writes all but ``sys.meta_path``. Which modules are registered is kept here
(``_registered``), not in DomainBed's modules.

Entry-point groups
------------------

One group per registry, so that any installed package can add components without editing
DomainBed:

=============================== ====================================================
entry-point group               object the entry point names
=============================== ====================================================
``domainbed.algorithms``        an ``Algorithm`` subclass, optional ``HPARAMS``
``domainbed.datasets``          a ``MultipleDomainDataset`` subclass, optional ``HPARAMS``
                                and ``recorded_hparams()`` (written by its ``__init__``:
                                :mod:`dmg_domainbed.datasets.when_built`)
``domainbed.command_launchers`` a function ``launcher(commands: list[str])``
=============================== ====================================================

``HPARAMS`` is an :class:`~dmg_domainbed.hparams.HParamSpace` or a mapping
``{name: (default, sampler)}``. Dataset hparams apply to every algorithm run on that dataset;
algorithm hparams come last. This package's algorithms are registered through the same groups.
A broken entry point is reported once on stderr and skipped; one whose module was still being
imported when DomainBed was registered is tried again at each lookup (see :func:`load`).
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


#: The distribution whose entry points name this package's own components.
OWN_DISTRIBUTION = "dmg-domainbed"


def _distribution(entry_point: metadata.EntryPoint) -> str | None:
    """The normalised name of the distribution that declares ``entry_point`` (PEP 503)."""
    dist = getattr(entry_point, "dist", None)
    name = getattr(dist, "name", None)
    return re.sub(r"[-_.]+", "-", name).lower() if name else None


@functools.cache
def entry_points(group: str) -> dict[str, metadata.EntryPoint]:
    """The installed entry points of ``group`` by name.

    A name claimed by this package and by another keeps this package's, wherever the other
    stands on ``sys.path``: a third-party ``DMG`` must not run under this package's name (as
    DomainBed's own names are kept by :func:`_add_to_namespace`). A name two other packages
    claim keeps the first on ``sys.path``. Each refused entry point is reported once.
    """
    found: dict[str, metadata.EntryPoint] = {}
    for entry_point in metadata.entry_points(group=group):
        kept = found.setdefault(entry_point.name, entry_point)
        if kept is entry_point or kept.value == entry_point.value:
            continue
        if _distribution(entry_point) == OWN_DISTRIBUTION:
            found[entry_point.name] = entry_point
            kept, entry_point = entry_point, kept
        _report_refused(group, kept, entry_point)
    return found


def _report_refused(group: str, kept: metadata.EntryPoint, refused: metadata.EntryPoint) -> None:
    name, other = refused.name, _distribution(refused) or "an installed package"
    if _distribution(kept) == OWN_DISTRIBUTION:
        report_once(
            f"entry point '{name} = {refused.value}' of group '{group}' (from {other}) is not "
            f"registered: '{name}' is {OWN_DISTRIBUTION}'s own ('{kept.value}'), which every "
            f"command keeps. Rename the entry point in {other}."
        )
        return
    report_once(
        f"entry point '{name}' of group '{group}' is declared twice ('{kept.value}' from "
        f"{_distribution(kept)} and '{refused.value}' from {other}); using the first. "
        "Uninstall one of the two packages."
    )


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
    """Load one entry point; a failure is reported once and gives ``None``. With ``report``
    false the caller shows the failure itself: this entry point's failures are not reported
    in this process from then on.

    A plugin module that imports DomainBed, imported before DomainBed, has DomainBed registered
    half-way through its own import, so its entry point cannot load yet. What is in
    ``sys.modules`` before the load tells such a failure, with no look at the call stack:

    * its entry point is being loaded already (importing it imported DomainBed): ``None``;
    * an ``ImportError`` or ``AttributeError`` that says a name is missing from a module that
      was imported (perhaps half-way) before this load, the entry point's own module or the
      ``M`` of a ``from M import X`` of the plugin: "not yet". Its name is listed in DomainBed's
      module, nothing is reported, each lookup tries again, and :func:`require` raises the
      error if it still fails;
    * any other ``ImportError`` or ``AttributeError`` while the plugin's top-level package was
      imported before: reported, and tried again at each lookup (a module of that package may
      be half-way through its import);
    * any other failure: reported, and final.
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
        return _failed(key, entry_point, error, imported_before)
    finally:
        _loading.discard(key)
    _failures.pop(key, None)
    _not_yet.discard(key)
    _loaded[key] = obj
    return obj


def _missing_from_imported(entry_point, error: Exception, imported_before: set[str]) -> bool:
    """Whether ``error`` says a name is missing from a module imported before the load: the
    entry point's attribute from its module, or ``X`` of a ``from M import X`` from ``M``
    (``ImportError.name``; a ``ModuleNotFoundError`` names the module that is missing)."""
    if isinstance(error, AttributeError):
        return entry_point.module in imported_before
    return isinstance(error, ImportError) and error.name in imported_before


def _failed(key: tuple[str, str], entry_point, error: Exception, imported_before) -> None:
    """Record a failed load: "not yet", reported and tried again, or final (see :func:`load`)."""
    _failures[key] = error
    retry = isinstance(error, (ImportError, AttributeError)) and (
        entry_point.module.partition(".")[0] in imported_before
    )
    if retry and _missing_from_imported(entry_point, error, imported_before):
        _not_yet.add(key)
        return None
    _not_yet.discard(key)
    group, name = key
    dist = getattr(entry_point.dist, "name", "an installed package")
    if key not in _shown_by_caller:
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
    gets its name listed now and its object filled in on a later lookup (see :func:`load`).
    """
    for name in entry_points(group):
        obj = load(group, name)
        if obj is None:
            late = (group, name) in _not_yet or (group, name) in _loading
            if late and name not in names:
                names.append(name)
            continue
        existing = module.__dict__.get(name)
        if existing is not None and existing is not obj:
            report_once(
                f"plugin {what} '{name}' (group '{group}') is not registered: DomainBed "
                f"already has {with_article(what)} of that name. Rename the entry point."
            )
            continue
        module.__dict__[name] = obj
        if name not in names:
            names.append(name)


def _open_namespace(module: ModuleType, names: str, group: str, what: str, lookup: str) -> None:
    """Register ``group`` into ``module``: every plugin into its globals and its list ``names``;
    DomainBed's ``lookup`` and a module ``__getattr__`` first load the plugin asked for by name,
    so that a late plugin is filled in and a broken one raises :class:`PluginImportError`.

    Both hooks are needed: DomainBed's lookup reads ``globals()``, which never calls a module's
    ``__getattr__``, and an attribute access never calls the lookup.
    """

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
    check_and_apply_when_built(module)


def check_and_apply_when_built(module: ModuleType) -> None:
    """Check the hparam names of every algorithm built from ``module.Algorithm``, and apply
    its ``precision`` and ``averaging`` hparams.

    DomainBed's algorithms and every plugin's call ``Algorithm.__init__`` first, before they
    build anything. Before it, :func:`dmg_domainbed.hparams.names.reject_unknown` refuses a
    name the run does not read, on the run's dataset in ``train.py`` (:func:`train_dataset`),
    else on any registered dataset. After it, :func:`dmg_domainbed.precision.apply` runs
    ``update`` and ``predict`` under bf16 autocast when the hparams say ``"bf16"`` and does
    nothing otherwise (before it, :func:`dmg_domainbed.averaging.seed_initialisation` seeds the
    networks the class builds next when the hparams give ``init_seed``); then
    :func:`dmg_domainbed.averaging.apply` has ``train.py`` evaluate and save the weights'
    average when the hparams ask for one, and does nothing otherwise.
    """
    from dmg_domainbed import averaging, precision
    from dmg_domainbed.hparams.names import reject_unknown

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
    """The class of ``train.py``'s ``--dataset`` when this process runs DomainBed's
    ``train.py`` (:func:`dmg_domainbed.datasets.training_split.train_arguments`), its
    ``--test_envs`` checked (:func:`dmg_domainbed.datasets.when_built.check_test_envs`: the
    package's datasets check them before reading any data, DomainBed's do not); else ``None``."""
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


# Each dataset class's N_WORKERS as its class body defines it, before any cap (None where it
# inherits the number): what a cap starts from, and what is put back without one.
_defined_loader_workers: dict[type, int | None] = {}


def _subclasses(cls: type) -> list[type]:
    found = []
    for subclass in cls.__subclasses__():
        found += [subclass, *_subclasses(subclass)]
    return found


def _own_workers(cls: type) -> int:
    """``cls.N_WORKERS`` as the class hierarchy defines it, before any cap."""
    for klass in cls.__mro__:
        if klass in _defined_loader_workers:
            defined = _defined_loader_workers[klass]
        else:
            defined = vars(klass).get("N_WORKERS")
        if defined is not None:
            return defined
    return 0


def _put_back_workers(cls: type) -> None:
    """Give ``cls`` the ``N_WORKERS`` its class body defines, or none where it inherits it."""
    defined = _defined_loader_workers[cls]
    if defined is not None:
        cls.N_WORKERS = defined
    elif "N_WORKERS" in vars(cls):
        del cls.N_WORKERS


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
    augmentation into the training process and change its random stream). Unset, nothing is
    written, and a class capped before gets its own number back. Called at registration and
    again by a forked job with its own environment.
    """
    budget = loader_workers_budget(environ)
    classes = _subclasses(module.MultipleDomainDataset)
    for cls in classes:
        _defined_loader_workers.setdefault(cls, vars(cls).get("N_WORKERS"))
    for cls in classes:
        own = _own_workers(cls)
        domains = len(getattr(cls, "ENVIRONMENTS", None) or ())
        if budget is None or own == 0 or domains < 2:
            _put_back_workers(cls)
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
    """Wrap ``_hparams`` so plugin datasets and algorithms add their declared hparams, and so
    ``train.py``'s ``--test_envs`` are checked (:func:`train_dataset`) before it reads any data.

    DomainBed's ``default_hparams`` and ``random_hparams`` look ``_hparams`` up in the module at
    call time, so replacing the module attribute is enough.
    """
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
    while trace is not None:
        module = trace.tb_frame.f_globals
        spec = module.get("__spec__")
        name = getattr(spec, "name", "") or ""
        if module.get("__name__") == "__main__" and name.startswith("domainbed.scripts."):
            return True
        trace = trace.tb_next
    return False


def end_scripts_with_user_message() -> None:
    """Have a :class:`UserError` that ends one of DomainBed's scripts print
    ``dmg-domainbed: error: MESSAGE`` alone on stderr (``train.py`` copies its stderr into
    ``err.txt``), without a traceback, as the ``dmg-domainbed`` commands do; the process still
    exits with status 1, as on any uncaught exception. Any other exception, and a
    :class:`UserError` that ends a program of one's own, goes to the hook that was there
    before, traceback and all."""
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
    """Register every plugin into one DomainBed module, unless it is registered already.

    ``importlib.reload`` runs DomainBed's code again in the same module object, which puts
    DomainBed's own lists and lookups back; the start-up hook then registers the module again
    (after an explicit :func:`dmg_domainbed.register`, calling it again does).
    """
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
