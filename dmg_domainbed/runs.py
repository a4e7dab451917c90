"""A DomainBed training run on disk (the ``--output_dir`` of one ``domainbed.scripts.train``:
``results.jsonl``, ``model.pkl``, ``done``): its records checked for the fields each reader
uses, its dataset for the environments and data it trained on; its algorithm, dataset and splits
rebuilt with DomainBed's own code, as train.py builds them. A run diverged when a loss it logged
is not finite (its exit status is still 0): every place that shows its numbers flags it.
"""

from __future__ import annotations

import json
import math
import pickle
import random
import re
from collections import namedtuple
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmg_domainbed.checkpoint_files import RefusedName, load_checkpoint
from dmg_domainbed.datasets.manifest import (
    CLASSES_HPARAM,
    DOMAINS_HPARAM,
    FILES_HPARAM,
    IMAGES_HPARAM,
    MANIFESTS_VARIABLE,
)
from dmg_domainbed.errors import UserError, report_once
from dmg_domainbed.shortlist import SHOWN, how_they_differ, shortlist

RESULTS_FILE = "results.jsonl"
MODEL_FILE = "model.pkl"
DONE_FILE = "done"
#: What train.py's ``save_checkpoint`` puts into ``model.pkl`` and ``model_step<N>.pkl``.
CHECKPOINT_KEYS = ("model_input_shape", "model_num_classes", "model_num_domains", "model_hparams")
CHECKPOINT_KEYS += ("model_dict",)
#: What each reader needs of a record: its purpose, fields (``args.x``: key ``x`` of ``args``)
#: and whether it reads the test domains' ``env<i>_in_acc`` / ``env<i>_out_acc``.
_FIELDS = ("step", "hparams", "args", "args.algorithm", "args.dataset", "args.test_envs")
_SEEDS = ("args.trial_seed", "args.hparams_seed")
RUN = ("every command that reads runs", _FIELDS, False)
SWEEP = ("collect_results' model selection", (*_FIELDS, *_SEEDS, "args.output_dir"), True)
_SPLIT = (*_FIELDS, *_SEEDS, "args.holdout_fraction")
SPLITS = ("the rebuilding of train.py's data splits", _SPLIT, False)
_ACCURACY_KEY = re.compile(r"env(\d+)_(?:in|out)_acc")
_ABSENT = object()


def _whole(value: Any) -> bool:
    """An int (a subclass too), not true or false."""
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    """An int or a float (numpy's too), not true or false."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _list_of(test: Any) -> Any:
    return lambda value: isinstance(value, list) and all(map(test, value))


#: Each kind of value a record's fields hold, by what a message calls it, and its test.
KINDS = {
    "a whole number": _whole,
    "a number (an accuracy)": _number,
    "a number from 0 to 1": lambda value: _number(value) and 0 <= value <= 1,
    "text": lambda value: isinstance(value, str),
    "text or null": lambda value: value is None or isinstance(value, str),
    "a JSON object of train.py's arguments": lambda value: isinstance(value, Mapping),
    "a JSON object of hparams": lambda value: isinstance(value, Mapping),
    "a list of names (text)": _list_of(lambda value: isinstance(value, str)),
    "a list of whole numbers": _list_of(_whole),
    "a list of environment numbers (whole numbers from 0)": (
        _list_of(lambda value: _whole(value) and value >= 0)
    ),
}
#: What every field a reader uses must be, wherever a record has it (:data:`KINDS`), in the order
#: they are checked; a soup's record (:mod:`dmg_domainbed.reporting.soups`) has ``soup.name``;
#: accuracies are numbers.
FIELD_TYPES = {
    "step": "a whole number",
    "args": "a JSON object of train.py's arguments",
    "hparams": "a JSON object of hparams",
    "args.algorithm": "text",
    "args.dataset": "text",
    "args.test_envs": "a list of environment numbers (whole numbers from 0)",
    **dict.fromkeys(("args.hparams_seed", "args.trial_seed", "args.seed"), "a whole number"),
    **dict.fromkeys(("args.holdout_fraction", "args.uda_holdout_fraction"), "a number from 0 to 1"),
    "args.output_dir": "text",
    "args.data_dir": "text or null",
    "hparams.precision": "text",
    f"hparams.{DOMAINS_HPARAM}": "a list of names (text)",
    f"hparams.{CLASSES_HPARAM}": "a list of names (text)",
    f"hparams.{IMAGES_HPARAM}": "a list of whole numbers",
    f"hparams.{FILES_HPARAM}": "text",
    "soup.name": "text",
}


def _field(record: Mapping[str, Any], field: str) -> Any:
    """The value of ``field`` (``args.x``: key ``x`` of ``args``) in ``record``, or _ABSENT."""
    value: Any = record
    for key in field.split("."):
        value = value.get(key, _ABSENT) if isinstance(value, Mapping) else _ABSENT
    return value


def _shown(value: Any) -> str:
    """``value`` as JSON (cut at 60 characters) and what JSON calls its type."""
    text = json.dumps(value)
    kinds = {bool: "true or false", str: "text", list: "a list", type(None): "null"}
    kind = kinds.get(type(value), "an object" if isinstance(value, Mapping) else "a number")
    return f"{text if len(text) <= 60 else f'{text[:57]}...'} ({kind})"


def wrong_field(record: Any, needs: tuple = ("", (), False)) -> str | None:
    """What is wrong with ``record`` (a line of ``results.jsonl``) for a reader of ``needs``
    (:data:`RUN`, :data:`SWEEP`, :data:`SPLITS`; by default the types alone): its first field
    not of :data:`FIELD_TYPES`' kind, else the fields it lacks; or None."""
    if not isinstance(record, Mapping):
        return f"the line is {_shown(record)}; expected a JSON object"
    accuracies = {key: "a number (an accuracy)" for key in record if _ACCURACY_KEY.fullmatch(key)}
    for field, kind in {**FIELD_TYPES, **accuracies}.items():
        value = _field(record, field)
        if value is not _ABSENT and not KINDS[kind](value):
            return f"{field} is {_shown(value)}; expected {kind}"
    absent: list[str] = []
    for field in needs[1]:
        if _field(record, field) is _ABSENT and not any(field.startswith(f"{a}.") for a in absent):
            absent.append(field)
    test_envs = _field(record, "args.test_envs")
    for env in test_envs if needs[2] and isinstance(test_envs, list) else ():
        absent += [k for k in (f"env{env}_in_acc", f"env{env}_out_acc") if k not in record]
    return f"it has no {', '.join(absent)} (read by {needs[0]})" if absent else None


def check_fields(records: Iterable[Any], path: Path, needs: tuple) -> None:
    """:class:`UserError` naming the line of the first record :func:`wrong_field` refuses, or a
    step not after the one before (two runs appended into one ``results.jsonl``)."""
    before = None
    for number, record in enumerate(records, start=1):
        if (wrong := wrong_field(record, needs)) is not None:
            raise UserError(
                f"'{path}' does not hold records as DomainBed's train.py writes them: line "
                f"{number}: {wrong}. It was written by another tool, edited, or written by "
                "an older or modified train.py. Give runs of domainbed.scripts.train (move "
                "other folders out of a sweep folder), or rerun the run with this DomainBed."
            )
        if before is not None and record["step"] <= before:
            raise UserError(
                f"'{path.parent}' holds more than one training run: line {number} of "
                f"{path.name} is step {record['step']}, after step {before}. train.py "
                f"appends to {path.name} (and saves model_step<N>.pkl beside the other "
                "run's), so a second run with the same --output_dir mixes both; their "
                "numbers and checkpoints would be read as one run's. Move that folder out "
                "of the folder read, or train each run into a new --output_dir."
            )
        before = record["step"]


@dataclass(frozen=True)
class Run:
    """One training run: its folder and the records train.py appended to ``results.jsonl``."""

    path: Path
    records: tuple[dict[str, Any], ...]
    args = property(lambda self: self.records[-1]["args"])
    hparams = property(lambda self: self.records[-1]["hparams"])
    algorithm = property(lambda self: self.args["algorithm"])
    dataset = property(lambda self: self.args["dataset"])
    test_envs = property(lambda self: list(self.args["test_envs"]))

    def environments(self) -> list[str]:
        return list(dataset_class(self.dataset, self.path).ENVIRONMENTS)

    def source_envs(self) -> list[int]:
        """Environment of each source domain ``d``, as DomainBed's ``update`` sees them."""
        return [env for env in range(len(self.environments())) if env not in self.test_envs]

    def domain_names(self) -> list[str]:
        """``d<i> = <environment>`` for each source domain of the run."""
        names = self.environments()
        return [f"d{d} = {names[env]}" for d, env in enumerate(self.source_envs())]

    def title(self) -> str:
        """``<dataset>, test domain <names> (hparams <i>, trial <j>, step <n>)``."""
        held_out = ", ".join(self.environments()[e] for e in self.test_envs)
        a, step = self.args, self.records[-1]["step"]
        seeds = f"hparams {a['hparams_seed']}, trial {a['trial_seed']}"
        return f"{self.dataset}, test domain {held_out} ({seeds}, step {step})"

    def describe(self) -> str:
        return f"{self.algorithm} on {self.dataset}, test envs {self.test_envs} ({self.path})"


def read_records(results_path: Path, lenient: bool = False) -> list[dict[str, Any]]:
    """The records of ``results_path``; a half-written last line left out with a warning
    (``lenient``: every line that is not a JSON object passed over, silently)."""
    lines = Path(results_path).read_text().splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as error:
            if lenient:
                continue
            if number < len(lines):
                raise UserError(
                    f"'{results_path}' is damaged at line {number} of {len(lines)} ({error}); "
                    "only a half-written last line can be left out. Rerun that job (delete its "
                    "folder, then launch the sweep again), or remove the line by hand."
                ) from None
            report_once(
                f"warning: '{results_path}': its last line is half-written (a job stopped while "
                f"writing it?); the {len(records)} complete record(s) before it are used"
            )
    return [r for r in records if isinstance(r, dict)] if lenient else records


def run_folders(sweep_dir: Path) -> list[Path]:
    """Sub-folders of ``sweep_dir`` that hold a ``results.jsonl``, sorted by name."""
    return sorted(p.parent for p in Path(sweep_dir).glob(f"*/{RESULTS_FILE}"))


def read_run(run_dir: str | Path) -> Run:
    """Read one run folder; a wrong folder raises :class:`UserError` saying what to give."""
    path = Path(run_dir)
    if not path.is_dir():
        raise UserError(
            f"run folder '{path}' does not exist. Give the folder of one training run: "
            f"the --output_dir of domainbed.scripts.train, or one sub-folder of a sweep."
        )
    results = path / RESULTS_FILE
    if not results.is_file():
        inside = run_folders(path)
        hint = f" It looks like a sweep folder with {len(inside)} runs; give one of them, e.g."
        hint = f"{hint} --run_dir {inside[0]}" if inside else ""
        raise UserError(
            f"'{path}' is not a DomainBed training run: it has no {RESULTS_FILE}.{hint}"
        )
    records = read_records(results)
    if not records:
        raise UserError(
            f"'{results}' holds no complete record: the run has not reached its first "
            "checkpoint yet. Wait for it, or rerun it with domainbed.scripts.train."
        )
    check_fields(records, results, RUN)
    check_environments(records, results)
    return Run(path=path, records=tuple(records))


def dataset_class(name: str, where: Path) -> type:
    """DomainBed's class of dataset ``name``, or :class:`UserError` saying how to make it known."""
    from domainbed import datasets

    try:
        return datasets.get_dataset_class(name)
    except NotImplementedError:
        raise UserError(
            f"'{where}' holds runs of dataset '{name}', which DomainBed does not know here. A "
            f"dataset of a manifest file is known only where {MANIFESTS_VARIABLE} names that "
            f"manifest, as when the runs were trained: export {MANIFESTS_VARIABLE}="
            f"/absolute/path/to/{name}.toml (files or folders, ':'-separated) and run the "
            "command again. A dataset of another package needs that package installed."
        ) from None


def check_environments(records: Iterable[Mapping[str, Any]], path: Path) -> None:
    """:class:`UserError` unless the dataset of ``records`` is known, with the environments it
    logged accuracies for, its test environments and the domains it recorded, in order."""
    for record in records:
        args = record["args"]
        names = list(dataset_class(args["dataset"], path).ENVIRONMENTS)
        trained_on = record.get("hparams", {}).get(DOMAINS_HPARAM, names)
        if list(trained_on) != names:
            raise UserError(
                f"'{path}' holds a run trained on the domains {', '.join(trained_on)} of "
                f"{args['dataset']}, in that order, but its manifest lists "
                f"{', '.join(names)} today: the run's numbers would be shown under other "
                "domains' names. Restore the manifest's 'domains' as they were when the run "
                "trained, or move this run out of the folder read."
            )
        logged = {int(m[1]) for key in record if (m := _ACCURACY_KEY.fullmatch(key))}
        recorded = max(logged) + 1 if logged else None
        beyond = max(args["test_envs"], default=-1) >= len(names)
        if (recorded or len(names)) != len(names) or beyond:
            had = f"{recorded} environments" if recorded else "other environments"
            raise UserError(
                f"'{path}' holds a run trained on {had} of {args['dataset']} (test envs "
                f"{args['test_envs']}), but {args['dataset']} has {len(names)} today "
                f"({', '.join(names)}): its domains changed since (a manifest edited, a domain "
                "folder added or removed), so the run's numbers would be shown under other "
                "domains' names. Restore the dataset as it was trained, or move this run out "
                "of the folder read."
            )


def require_model(run: Run) -> Path:
    """The run's ``model.pkl``, or :class:`UserError` explaining why it is missing."""
    if not (run.path / MODEL_FILE).is_file():
        raise UserError(
            f"run '{run.path}' has no {MODEL_FILE}. train.py writes it when training ends; "
            f"wait until the run has finished (a '{DONE_FILE}' file appears), or rerun it without "
            "--skip_model_save."
        )
    return run.path / MODEL_FILE


def require_sweep(sweep_dir: str | Path) -> Path:
    """``sweep_dir`` as a Path, or :class:`UserError` if it holds no training run."""
    path = Path(sweep_dir)
    if not path.is_dir():
        raise UserError(
            f"sweep folder '{path}' does not exist. Give the --output_dir of "
            "domainbed.scripts.sweep (or of 'dmg-domainbed demo', its 'sweep' sub-folder)."
        )
    if not run_folders(path):
        hint = f" Did you mean --input_dir {path / 'sweep'}?" if (path / "sweep").is_dir() else ""
        if (path / RESULTS_FILE).is_file():
            hint = " It is a single run; give the folder that holds the runs (its parent)."
        raise UserError(
            f"no training runs in '{path}': expected sub-folders with {RESULTS_FILE}, as "
            f"domainbed.scripts.sweep writes them.{hint}"
        )
    return path


def device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def algorithm_class(run: Run) -> type:
    """The DomainBed algorithm class the run trained, or :class:`UserError` if unknown here."""
    from domainbed import algorithms

    try:
        return algorithms.get_algorithm_class(run.algorithm)
    except NotImplementedError as error:
        raise UserError(
            f"'{run.path}' was trained with algorithm '{run.algorithm}', which this DomainBed "
            f"does not know ({error}). Install the package that provides it."
        ) from None


def checkpoint_models(run: Run) -> dict[int, Path]:
    """``{step: path}`` of the ``model_step<step>.pkl`` train.py saved at its checkpoints."""
    found = {p.stem.removeprefix("model_step"): p for p in run.path.glob("model_step*.pkl")}
    return dict(sorted((int(step), p) for step, p in found.items() if step.isdigit()))


def load_algorithm(run: Run, on: str | None = None, model_file: Path | None = None, dataset=None):
    """The algorithm saved in the run's ``model.pkl`` (or ``model_file``), in eval mode, rebuilt
    as DomainBed's scripts reload models; checked to fit ``dataset`` (the run's, rebuilt)."""
    path = model_file if model_file is not None else require_model(run)
    algorithm_class(run)  # an algorithm unknown here is refused before its model file is read
    checkpoint = read_checkpoint(path, on)
    if dataset is not None:
        check_model_fits(run, path, checkpoint, dataset)
    algorithm = build_algorithm(run, checkpoint)
    algorithm.load_state_dict(checkpoint["model_dict"])
    return algorithm.to(on or device()).eval()


def read_checkpoint(path: Path, on: str | None = None) -> dict[str, Any]:
    """The checkpoint train.py saved at ``path``, read without running code a file holds."""
    try:
        checkpoint = load_checkpoint(path, map_location=on or device())
    except RefusedName as error:
        raise UserError(
            f"'{path}' was not read: it names {error.qualified}, which no model saved by "
            "DomainBed's train.py names (a checkpoint holds tensors, numbers, strings, lists "
            "and dicts), and reading it could run code planted in the file. Delete the file "
            "and train the run again to write its own model."
        ) from None
    except (EOFError, OSError, RuntimeError, pickle.UnpicklingError) as error:
        raise UserError(
            f"'{path}' cannot be read ({type(error).__name__}: {error}): it is damaged or was "
            "cut short (a job stopped while saving it?). Rerun the run to write it again."
        ) from None
    if absent := [
        k for k in CHECKPOINT_KEYS if not isinstance(checkpoint, dict) or k not in checkpoint
    ]:
        raise UserError(
            f"'{path}' is not a model saved by DomainBed's train.py: it has no "
            f"{', '.join(absent)}. Rerun the run to write it again."
        )
    return checkpoint


def build_algorithm(run: Run, checkpoint: Mapping[str, Any]):
    """The run's algorithm built afresh from ``checkpoint``, as train.py built it, unloaded, with
    the saved hparams its class reads: a name nothing read (a run trained before the names rule,
    a misspelt one) trained without effect, so is left out, not refused."""
    from dmg_domainbed.hparams.names import known_names

    input_shape, num_classes, num_domains, hparams = (checkpoint[k] for k in CHECKPOINT_KEYS[:4])
    cls = algorithm_class(run)
    known = known_names(cls, input_shape=input_shape)
    hparams = {name: value for name, value in hparams.items() if name in known}
    return cls(input_shape, num_classes, num_domains, hparams)


def check_model_fits(run: Run, path: Path, checkpoint: Mapping[str, Any], dataset) -> None:
    """:class:`UserError` unless the saved model's classes and input shape are ``dataset``'s."""
    saved = (checkpoint["model_num_classes"], tuple(checkpoint["model_input_shape"]))
    today = (dataset.num_classes, tuple(dataset.input_shape))
    if saved != today:
        raise _changed(
            run,
            f"'{path}' predicts {saved[0]} classes from inputs of shape {saved[1]}; the "
            f"dataset gives {today[0]} classes and inputs of shape {today[1]} today",
        )


def load_dataset(run: Run, data_dir: str | None = None, augment: bool = True):
    """The run's dataset, built as train.py built it (from ``data_dir`` if given, not for a
    manifest dataset; Python, NumPy and torch seeded as train.py seeds them, the caller's states
    given back) and checked against what the run recorded (:func:`check_rebuilt`)."""
    import numpy as np
    import torch

    from dmg_domainbed.hparams.recorded import recorded_hparams  # not at import: numpy

    check_fields(run.records, run.path / RESULTS_FILE, SPLITS)
    root = data_dir if data_dir is not None else run.args.get("data_dir")
    built = dataset_class(run.dataset, run.path)
    manifest = getattr(built, "MANIFEST", None)
    if data_dir is not None and manifest is not None:
        raise UserError(
            f"--data_dir '{data_dir}' would not be read for {run.describe()}: {run.dataset} "
            f"is a manifest dataset, whose images lie where its manifest '{manifest.path}' "
            f"says (root '{manifest.root}'), wherever --data_dir points. Leave out "
            "--data_dir; to use a copy of the images, write a manifest of the same name whose "
            f"root is that copy and name it in {MANIFESTS_VARIABLE} instead."
        )
    # Rebuilt from the run's settings alone: what the dataset records of itself is written
    # again as it is built, then compared with what the run recorded (check_rebuilt).
    recorded = recorded_hparams(built)
    hparams = {name: value for name, value in run.hparams.items() if name not in recorded}
    if not augment:
        hparams["data_augmentation"] = False
    seed = run.args.get("seed", 0)
    python_state, numpy_state = random.getstate(), np.random.get_state()  # the caller's
    try:
        with torch.random.fork_rng(devices=[]):
            random.seed(seed)
            np.random.seed(seed)
            torch.manual_seed(seed)
            dataset = built(root, run.test_envs, hparams)
    except UserError:
        raise
    except (OSError, RuntimeError, ValueError) as error:
        raise UserError(
            f"cannot load dataset {run.dataset} from data_dir '{root}' "
            f"({type(error).__name__}: {error}). Pass --data_dir with the folder the run "
            "was trained on."
        ) from None
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)
    check_rebuilt(run, dataset, hparams)
    return dataset


def _changed(run: Run, detail: str) -> UserError:
    """The error for a run whose dataset no longer holds the data it trained on."""
    return UserError(
        f"'{run.path}' holds a run of {run.dataset} whose data changed since it trained: "
        f"{detail}. Its model would be scored on other classes or other data splits than it "
        "trained and tested on. Restore the dataset as it was when the run trained (or pass "
        "--data_dir with that copy), or train the run again."
    )


def check_rebuilt(run: Run, dataset, rebuilt_hparams: Mapping[str, Any]) -> None:
    """:class:`UserError` unless ``dataset``, rebuilt for ``run``, holds the data it trained on:
    a manifest dataset's recorded classes, images and files (:mod:`.hparams.recorded`), and any
    dataset's smallest training split (from the epoch train.py logs)."""
    then, today = run.hparams, rebuilt_hparams
    recorded = (CLASSES_HPARAM, IMAGES_HPARAM, FILES_HPARAM)
    changed = next((n for n in recorded if n in then and then[n] != today.get(n)), None)
    before, now = then.get(changed), today.get(changed) or []
    if changed == CLASSES_HPARAM:
        alike = [
            f"class {label} was {a!r} and is {b!r} today, which differ in {how}"
            for label, (a, b) in enumerate(zip(before, now))
            if (how := how_they_differ(a, b))
        ]
        raise _changed(
            run,
            f"it trained on the classes {shortlist([repr(c) for c in before])} (in label "
            f"order), the dataset has {shortlist([repr(c) for c in now])} today"
            + "".join(f"; {line}" for line in alike[:SHOWN]),
        )
    if changed == IMAGES_HPARAM:
        before, now = (
            [f"{e} {n:,}" for e, n in zip(dataset.ENVIRONMENTS, i)] for i in (before, now)
        )
        raise _changed(run, f"its domains held {shortlist(before)} images, today {shortlist(now)}")
    if changed == FILES_HPARAM:
        raise _changed(
            run,
            "the same classes and numbers of images, but other image files or labels (digest "
            f"{before} when it trained, {today.get(FILES_HPARAM)} today)",
        )
    # train.py logs epoch = step * batch_size / min(len(in_split)): from its first record
    # after step 0, the smallest in-split the run trained on.
    batch_size = run.hparams.get("batch_size")
    for record in run.records:
        step, epoch = record.get("step"), record.get("epoch")
        if all(isinstance(v, int | float) and v > 0 for v in (step, epoch, batch_size)):
            logged = round(step * batch_size / epoch)
            smallest = min(len(split.in_keys) for split in rebuild_splits(dataset, run.args))
            if logged != smallest:
                raise _changed(
                    run,
                    f"its smallest training split (train.py's in-split) held {logged:,} images, "
                    f"today {smallest:,}: images were added or removed",
                )
            return


def augmented_evaluation(run: Run) -> bool:
    """Whether train.py classified the training domains' held-out images augmented (DomainBed's
    image and WILDS datasets augment all of a training domain with ``data_augmentation``)."""
    from domainbed import datasets

    names = ("MultipleEnvironmentImageFolder", "WILDSDataset", "SpawriousBenchmark")
    augmenting = tuple(getattr(datasets, n) for n in names if hasattr(datasets, n))
    built = dataset_class(run.dataset, run.path)
    return bool(run.hparams.get("data_augmentation")) and issubclass(built, augmenting)


#: Indices (into environment ``env``) of train.py's ``in``, ``out`` and ``uda`` parts.
EnvSplit = namedtuple("EnvSplit", "env in_keys out_keys uda_keys")


def rebuild_splits(dataset, args: dict[str, Any]) -> list[EnvSplit]:
    """Every environment's split by train.py's own calls and seeds, given its ``args``."""
    from domainbed.lib import misc

    splits = []
    for env_i, env in enumerate(dataset):
        seed = misc.seed_hash(args["trial_seed"], env_i)
        out, in_ = misc.split_dataset(env, int(len(env) * args["holdout_fraction"]), seed)
        in_keys, uda_keys = list(in_.keys), []
        if env_i in args["test_envs"]:  # split again as train.py does, into env's indices
            fraction = args.get("uda_holdout_fraction", 0)
            uda, in_ = misc.split_dataset(in_, int(len(in_) * fraction), seed)
            in_keys, uda_keys = [in_keys[k] for k in in_.keys], [in_keys[k] for k in uda.keys]
        splits.append(EnvSplit(env_i, in_keys, list(out.keys), uda_keys))
    return splits


def divergence(records: Iterable[Mapping[str, Any]]) -> str | None:
    """``'loss nan at step 300'``: the first loss a record logged that is not finite, or None."""
    for record in records:
        for key, value in record.items():
            if "loss" in key.lower() and isinstance(value, float) and not math.isfinite(value):
                return f"{key} {value} at step {record.get('step', '?')}"
    return None


def folder_divergence(folder: Path) -> str | None:
    """:func:`divergence` of ``folder``'s ``results.jsonl`` read leniently (none without one)."""
    try:
        return divergence(read_records(Path(folder) / RESULTS_FILE, lenient=True))
    except (OSError, UnicodeDecodeError):
        return None


def warnings(runs: Iterable[Any]) -> list[str]:
    """A warning line for each diverged one of ``runs`` (:class:`~.runs.Run`)."""
    return [
        f"WARNING: {run.describe()} diverged ({diverged}): its numbers come from the "
        "weights that non-finite losses left. Lower lr or the penalty weights and rerun it."
        for run in runs
        if (diverged := divergence(run.records))
    ]
