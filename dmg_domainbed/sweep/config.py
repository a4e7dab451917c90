"""Sweep files (``sweeps/*.toml``, docs/sweeps.md): :func:`load_sweep` reads one in one pass,
its ``[launcher]`` first (:mod:`.launcher_settings`), then ``[sweep]`` against its rules
(:data:`SWEEP_KEYS`, DomainBed's defaults; ``n_hparams`` and ``n_trials`` bounded, as DomainBed
makes every job in memory first), then the command line's folders and launcher over the file's.
Nothing here looks anything up in DomainBed (:mod:`.checks` does)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from dmg_domainbed.errors import UserError
from dmg_domainbed.hparams.every_algorithm import DOMAINBED_PROTOCOL, PROTOCOL, PROTOCOLS
from dmg_domainbed.rules import Rule, not_blank, refuse_unknown_keys
from dmg_domainbed.sweep.launcher_settings import launcher_table

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

TASKS = ("domain_generalization", "domain_adaptation")
# DomainBed's defaults are 20 hparam settings and 3 trials; its papers' sweeps stay below these.
MAX_HPARAMS, MAX_TRIALS = 1000, 100


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
    n_hparams: int = _key(Rule((int,), minimum=1, maximum=MAX_HPARAMS), default=20)
    n_hparams_from: int = _key(Rule((int,), minimum=0), default=0)
    n_trials: int = _key(Rule((int,), minimum=1, maximum=MAX_TRIALS), default=3)
    steps: int | None = _key(Rule((int,), minimum=1), default=None)
    checkpoint_freq: int | None = _key(Rule((int,), minimum=1), default=None)
    save_model_every_checkpoint: bool = _key(Rule((bool,)), default=False)
    single_test_envs: bool = _key(Rule((bool,)), default=False)
    holdout_fraction: float = _key(Rule((float,), minimum=0.01, maximum=0.99), default=0.2)
    task: str = _key(Rule((str,), choices=TASKS), default="domain_generalization")
    data_dir: str | None = _key(Rule((str,), validate=not_blank), default=None)
    output_dir: str | None = _key(Rule((str,), validate=not_blank), default=None)
    protocol: str = _key(Rule((str,), choices=PROTOCOLS), default=DOMAINBED_PROTOCOL)
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


def parse_sweep(document: Mapping[str, Any], path: Path, registered: bool = True) -> SweepConfig:
    """A :class:`SweepConfig` from a parsed TOML document, its ``[launcher]`` first (checked
    against the registered launchers with ``registered``); :class:`UserError` if invalid."""

    def fail(message: str) -> UserError:
        return UserError(f"{path}: {message}")

    name, launcher = launcher_table(path, document.get("launcher", {}), registered)
    refuse_unknown_keys(path, "the file (top-level tables)", document, ("sweep", "launcher"))
    sweep = document.get("sweep")
    if not isinstance(sweep, dict):
        raise fail("a [sweep] table is required, with at least algorithms and datasets")
    if "test_envs" in sweep:
        raise fail(
            f"[sweep] test_envs = {sweep['test_envs']!r}: a DomainBed sweep holds out every "
            "domain in turn, not chosen ones (single_test_envs = true: each domain alone; "
            "false, the default: each domain and every pair). Remove test_envs; to train with "
            "one held-out domain, run one job: python -m domainbed.scripts.train --algorithm "
            "NAME --dataset NAME --test_envs N --data_dir DIR --output_dir DIR"
        )
    refuse_unknown_keys(path, "[sweep]", sweep, SWEEP_KEYS)
    for key in REQUIRED:
        if key not in sweep:
            raise fail(f"[sweep] needs {key} = [...] ({SWEEP_KEYS[key].allowed()} of names)")
    for key, value in sweep.items():
        SWEEP_KEYS[key].check(value, f"{path}: [sweep] {key}", "Fix it in the sweep file.")
    names = {key: tuple(sweep[key]) for key in REQUIRED}
    config = SweepConfig(path, launcher=name, launcher_options=launcher, **{**sweep, **names})
    n_from, n_hparams = config.n_hparams_from, config.n_hparams
    if n_from >= n_hparams:
        raise fail(f"[sweep] n_hparams_from = {n_from} must be below n_hparams = {n_hparams}")
    if config.protocol != DOMAINBED_PROTOCOL and not config.single_test_envs:
        raise fail(
            f'[sweep] protocol = "{config.protocol}" chooses each test domain\'s hparams by '
            "DomainBed's training-domain validation, which reads jobs with one test domain "
            "only; the jobs holding out pairs of domains would have no winner. Add "
            "single_test_envs = true to [sweep]."
        )
    for algorithm in config.algorithm_hparams:
        if algorithm not in config.algorithms:
            raise fail(
                f"[sweep.algorithm_hparams.{algorithm}]: {algorithm} is not one of the sweep's "
                f"algorithms ({', '.join(config.algorithms)})"
            )
    tables = {"hparams": config.hparams}
    tables |= {f"algorithm_hparams.{name}": t for name, t in config.algorithm_hparams.items()}
    for where, table in tables.items():
        for name, value in table.items():  # hparams go to DomainBed as JSON: no TOML dates
            if not isinstance(value, bool | int | float | str | list | dict):
                raise fail(
                    f"[sweep.{where}]: {name} = {value!r} ({type(value).__name__}) cannot be an "
                    "hparam; use a number, string, boolean, list or table"
                )
        if PROTOCOL in table:
            raise fail(
                f"[sweep.{where}] {PROTOCOL} = {table[PROTOCOL]!r}: the protocol is the sweep's, "
                f'not an hparam to fix: write protocol = "..." in [sweep] ({", ".join(PROTOCOLS)})'
            )
    return config


def load_sweep(path: str | Path, registered: bool = True) -> SweepConfig:
    """Read and check a sweep file (:func:`parse_sweep`); :func:`resolve` adds the folders."""
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
    return parse_sweep(document, path, registered)


@dataclass(frozen=True)
class Sweep:
    """A file's content, its folders made absolute and its launcher (``None``: none named)."""

    config: SweepConfig
    data_dir: str
    output_dir: str
    launcher: str | None = None


def resolve(
    config: SweepConfig,
    data_dir: str | None,
    output_dir: str | None,
    launcher: str | None = None,
) -> Sweep:
    """The command line's folders and launcher over the file's."""
    dirs = {"data_dir": data_dir or config.data_dir, "output_dir": output_dir or config.output_dir}
    for key, value in dirs.items():
        if value is None:
            raise UserError(
                f'{config.path}: no {key}: set {key} = "..." in [sweep] or pass --{key} DIR'
            )
    folders = {key: os.path.abspath(os.path.expanduser(value)) for key, value in dirs.items()}
    return Sweep(config, **folders, launcher=launcher or config.launcher)
