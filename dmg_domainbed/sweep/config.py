"""Sweep files (``sweeps/*.toml``): a DomainBed sweep written down once, checked before it runs.

``[sweep]`` holds what ``python -m domainbed.scripts.sweep`` takes (:data:`SWEEP_KEYS`, with
DomainBed's defaults) and the fixed hparams of every job (``[sweep.hparams]``) or algorithm
(``[sweep.algorithm_hparams.NAME]``); ``[launcher]`` names a DomainBed command launcher and its
settings (its ``options``). :func:`load_sweep` checks the structure, and
:func:`check_against_domainbed` the names and hparams, with this package's plugins registered.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from dmg_domainbed.errors import UserError
from dmg_domainbed.rules import Rule, not_blank

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

TASKS = ("domain_generalization", "domain_adaptation")


def _distinct_names(names: list) -> None:
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ValueError("it must be a non-empty list of names")
    if len(set(names)) != len(names):
        raise ValueError("it must not name anything twice")


def _hparam_tables(tables: dict) -> None:
    if not all(isinstance(table, dict) for table in tables.values()):
        raise ValueError("it must hold tables [sweep.algorithm_hparams.NAME] of hparam = value")


def _key(rule: Rule, **default: Any) -> Any:
    """A ``[sweep]`` key: what its value may be, and its default (DomainBed's)."""
    return field(metadata={"rule": rule}, **default)


@dataclass(frozen=True)
class SweepConfig:
    """A sweep file's content, DomainBed's defaults filled in; :func:`_key` makes its keys."""

    path: Path
    algorithms: tuple[str, ...] = _key(Rule((list,), validate=_distinct_names))
    datasets: tuple[str, ...] = _key(Rule((list,), validate=_distinct_names))
    n_hparams: int = _key(Rule((int,), minimum=1), default=20)
    n_hparams_from: int = _key(Rule((int,), minimum=0), default=0)
    n_trials: int = _key(Rule((int,), minimum=1), default=3)
    steps: int | None = _key(Rule((int,), minimum=1), default=None)
    checkpoint_freq: int | None = _key(Rule((int,), minimum=1), default=None)
    save_model_every_checkpoint: bool = _key(Rule((bool,)), default=False)
    single_test_envs: bool = _key(Rule((bool,)), default=False)
    holdout_fraction: float = _key(Rule((float,), minimum=0.01, maximum=0.99), default=0.2)
    task: str = _key(Rule((str,), choices=TASKS), default="domain_generalization")
    data_dir: str | None = _key(Rule((str,), validate=not_blank), default=None)
    output_dir: str | None = _key(Rule((str,), validate=not_blank), default=None)
    hparams: Mapping[str, Any] = _key(Rule((dict,)), default_factory=dict)
    algorithm_hparams: Mapping[str, Mapping[str, Any]] = _key(
        Rule((dict,), validate=_hparam_tables), default_factory=dict
    )
    launcher: str | None = None
    launcher_options: Mapping[str, Any] = field(default_factory=dict)

    def hparams_of(self, algorithm: str) -> dict[str, Any]:
        """The fixed hparams of ``algorithm``'s jobs: common ones, then its own."""
        return {**self.hparams, **self.algorithm_hparams.get(algorithm, {})}


SWEEP_KEYS = {key.name: key.metadata["rule"] for key in fields(SweepConfig) if key.metadata}
REQUIRED = ("algorithms", "datasets")


def refuse_unknown_keys(path: Path, where: str, given: Iterable[str], valid: Iterable[str]) -> None:
    """Refuse the keys of ``given`` that are not ``valid``, naming the valid ones."""
    unknown = ", ".join(sorted(set(given) - set(valid)))
    if unknown:
        raise UserError(
            f"{path}: unknown key(s) {unknown} in {where}; valid keys: {', '.join(valid)}"
        )


def _check_json_values(table: Mapping[str, Any], where: str) -> None:
    """hparams go to DomainBed as JSON: TOML dates and times cannot."""
    for name, value in table.items():
        if not isinstance(value, bool | int | float | str | list | dict):
            raise UserError(
                f"{where}: {name} = {value!r} ({type(value).__name__}) cannot be an hparam; "
                "use a number, string, boolean, list or table"
            )


def parse_sweep(document: Mapping[str, Any], path: Path) -> SweepConfig:
    """A :class:`SweepConfig` from a parsed TOML document; :class:`UserError` if invalid."""

    def fail(message: str) -> UserError:
        return UserError(f"{path}: {message}")

    refuse_unknown_keys(path, "the file (top-level tables)", document, ("sweep", "launcher"))
    sweep = document.get("sweep")
    if not isinstance(sweep, dict):
        raise fail("a [sweep] table is required, with at least algorithms and datasets")
    refuse_unknown_keys(path, "[sweep]", sweep, SWEEP_KEYS)
    for key in REQUIRED:
        if key not in sweep:
            raise fail(f"[sweep] needs {key} = [...] ({SWEEP_KEYS[key].allowed()} of names)")
    for key, value in sweep.items():
        SWEEP_KEYS[key].check(value, f"{path}: [sweep] {key}", "Fix it in the sweep file.")
    if not isinstance(document.get("launcher", {}), dict):
        raise fail('[launcher] must be a table with name = "LAUNCHER" and its settings')
    launcher = dict(document.get("launcher", {}))
    name = launcher.pop("name", None)
    if name is not None:
        Rule((str,), validate=not_blank).check(
            name, f"{path}: [launcher] name", "Name a DomainBed command launcher."
        )
    if launcher and name is None:
        raise fail(f'[launcher] has settings ({", ".join(launcher)}) but no name = "..."')
    names = {key: tuple(sweep[key]) for key in REQUIRED}
    config = SweepConfig(path, launcher=name, launcher_options=launcher, **{**sweep, **names})
    n_from, n_hparams = config.n_hparams_from, config.n_hparams
    if n_from >= n_hparams:
        raise fail(f"[sweep] n_hparams_from = {n_from} must be below n_hparams = {n_hparams}")
    _check_json_values(config.hparams, f"{path}: [sweep.hparams]")
    for algorithm, table in config.algorithm_hparams.items():
        if algorithm not in config.algorithms:
            raise fail(
                f"[sweep.algorithm_hparams.{algorithm}]: {algorithm} is not one of the sweep's "
                f"algorithms ({', '.join(config.algorithms)})"
            )
        _check_json_values(table, f"{path}: [sweep.algorithm_hparams.{algorithm}]")
    return config


def load_sweep(path: str | Path) -> SweepConfig:
    """Read and check a sweep file (structure only; see :func:`check_against_domainbed`)."""
    path = Path(path)
    try:
        with open(path, "rb") as stream:
            document = tomllib.load(stream)
    except FileNotFoundError:
        raise UserError(f"{path}: no such sweep file") from None
    except IsADirectoryError:
        raise UserError(f"{path} is a folder: give a sweep file, e.g. sweeps/demo.toml") from None
    except UnicodeDecodeError:
        raise UserError(
            f"{path} is not a text file (not UTF-8): a sweep file is TOML text, e.g. "
            "sweeps/demo.toml"
        ) from None
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"{path}: not valid TOML: {error}") from None
    return parse_sweep(document, path)


def launcher_options(name: str) -> dict[str, Any]:
    """The settings a registered command launcher declares, by ``[launcher]`` key."""
    from domainbed import command_launchers

    from dmg_domainbed.launchers.common import as_launcher

    declared = as_launcher(command_launchers.REGISTRY[name]).options
    return {option.name: option for option in declared}


def check_launcher(config: SweepConfig, name: str) -> None:
    """``name`` is a registered launcher; the file's settings are its settings (if it is its)."""
    from domainbed import command_launchers

    if name not in command_launchers.REGISTRY:
        raise UserError(
            f"{config.path}: unknown launcher {name!r}; registered DomainBed command launchers: "
            f"{', '.join(sorted(command_launchers.REGISTRY))}"
        )
    if name != config.launcher:
        return
    options = launcher_options(name)
    refuse_unknown_keys(config.path, f"[launcher] of {name}", config.launcher_options, options)
    for key, value in config.launcher_options.items():
        options[key].check(value, f"{config.path}: [launcher] {key}")


def check_against_domainbed(config: SweepConfig) -> list[str]:
    """Names and hparams that DomainBed (with this package's plugins) knows, or an error.
    Each of this package's algorithms is also built for each dataset with the fixed hparams
    (cheaply: :mod:`dmg_domainbed.preflight.networks`), so that a value only its network can
    refute stops the sweep here. Returns notes on builds that could not be made."""
    import dmg_domainbed
    from dmg_domainbed.algorithms.base import PluginAlgorithm
    from dmg_domainbed.preflight.hparams import effective_hparams
    from dmg_domainbed.preflight.networks import check_network

    dmg_domainbed.register()
    from domainbed import algorithms, datasets

    for kind, given, valid in (
        ("algorithm", config.algorithms, algorithms.ALGORITHMS),
        ("dataset", config.datasets, datasets.DATASETS),
    ):
        unknown = [name for name in given if name not in valid]
        if unknown:
            raise UserError(
                f"{config.path}: unknown {kind}(s) {', '.join(unknown)}; valid {kind}s: "
                f"{', '.join(valid)}"
            )
    notes: list[str | None] = []
    for algorithm, dataset in itertools.product(config.algorithms, config.datasets):
        try:
            effective_hparams(algorithm, dataset, config.hparams)
        except UserError as error:
            raise UserError(
                f"{config.path}: [sweep.hparams]: {error}. [sweep.hparams] applies to every "
                "algorithm: move an hparam that only some algorithms have to "
                "[sweep.algorithm_hparams.NAME] of those algorithms"
            ) from None
        where = f"[sweep.algorithm_hparams.{algorithm}]"
        try:
            hparams = effective_hparams(algorithm, dataset, config.hparams_of(algorithm))
            if issubclass(algorithms.get_algorithm_class(algorithm), PluginAlgorithm):
                where = f"{algorithm}'s network on {dataset}"
                notes.append(check_network(algorithm, dataset, hparams))
        except UserError as error:
            raise UserError(f"{config.path}: {where}: {error}") from None
    if config.launcher is not None:
        check_launcher(config, config.launcher)
    return [note for note in notes if note]
