"""What a sweep costs, before it starts: its work counted from its jobs, its hours from measured
times. Pure functions, no DomainBed.

A job (:class:`JobCost`, made by :func:`job_cost` from ``train.py``'s arguments as DomainBed's
``make_args_list`` gives them, the hparams it trains with and its dataset's
:class:`DatasetFacts`) works on its training images, steps x batch size x source domains, and its
evaluation images, checkpoints x every image of every domain (``train.py`` evaluates each split,
in and out, of each domain at every multiple of the checkpoint frequency and at the last step).
Its time on a device (:meth:`CostTable.hours`) is training images x seconds per training image +
evaluation images x seconds per evaluated image + its start-up and end, from the first
:class:`Measured` row of the device's table that matches it. :func:`table_from_gpu_proof` makes a
table from ``benchmarks/gpu_proof.py``'s results (``docs/generate.py`` writes the package's from
``docs/gpu_proof.json``), :func:`table_from_smoke` from ``dmg-domainbed smoke --json``'s;
:func:`estimate` sums the jobs per algorithm and dataset, :func:`render` gives what the dry run
prints.
"""

from __future__ import annotations

import json
from collections import namedtuple
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: What a row of a table may be keyed on; a row matches a job where every key it has agrees.
KEYS = ("algorithm", "dataset", "network", "precision", "jobs_per_gpu")


#: What a job's work depends on in its dataset: its number of domains, DomainBed's default steps
#: and checkpoint frequency, and its images, every domain's (``None``: not known here).
DatasetFacts = namedtuple("DatasetFacts", "environments steps checkpoint_freq images")


@dataclass(frozen=True)
class JobCost:
    """One job as its cost sees it: what matches it to a measured row, and its work."""

    algorithm: str
    dataset: str
    network: str
    precision: str
    jobs_per_gpu: int
    training_images: int
    eval_images: int | None


def checkpoints(steps: int, checkpoint_freq: int) -> int:
    """How many times ``train.py`` evaluates in ``steps`` steps: at each step that is a multiple
    of ``checkpoint_freq`` (step 0 included) and at the last step."""
    return -(-(steps - 1) // checkpoint_freq) + 1


def network(hparams: Mapping[str, Any], input_shape: Sequence[int] | None) -> str:
    """The featurizer DomainBed builds for ``input_shape`` with ``hparams`` (this package's
    AlexNet with ``alexnet``; with ``resnet50_augmix``, timm's resnet50.ram_in1k)."""
    if input_shape is None:
        return "unknown"
    if len(input_shape) == 1:
        return "mlp"
    small = {(28, 28): "mnist_cnn", (32, 32): "wide_resnet"}.get(tuple(input_shape[1:3]))
    if small is not None:
        return small
    if hparams.get("alexnet"):
        return "alexnet"
    if hparams.get("vit") and hparams.get("dinov2"):
        return "dinov2_vitb14"
    if hparams.get("resnet18") and not hparams.get("resnet50_augmix"):
        return "resnet18"
    return "resnet50"


def job_cost(
    train_args: Mapping[str, Any],
    hparams: Mapping[str, Any],
    facts: DatasetFacts,
    input_shape: Sequence[int] | None,
    jobs_per_gpu: int = 1,
) -> JobCost:
    """The :class:`JobCost` of the job of ``train_args`` (DomainBed's ``make_args_list``: no
    ``steps`` or ``checkpoint_freq`` means the dataset's), training with ``hparams``."""
    steps = train_args.get("steps") or facts.steps
    count = checkpoints(steps, train_args.get("checkpoint_freq") or facts.checkpoint_freq)
    sources = facts.environments - len(train_args["test_envs"])
    precision = str(hparams.get("precision", "fp32"))
    what = (
        train_args["algorithm"],
        train_args["dataset"],
        network(hparams, input_shape),
        precision,
    )
    images = None if facts.images is None else count * facts.images
    return JobCost(*what, jobs_per_gpu, steps * int(hparams["batch_size"]) * sources, images)


#: Measured seconds: per training image (a step's time over its images, data loading included
#: where the measure had it), per evaluated image, and per job for its start-up and end (``None``:
#: not measured); ``key``, what the row is for (:data:`KEYS`).
Measured = namedtuple("Measured", "train_s_per_image eval_s_per_image job_s key")


@dataclass(frozen=True)
class CostTable:
    """The measured rows of one ``device``; ``source`` says where and when they were measured,
    ``not_measured`` what they leave out."""

    device: str
    source: str
    rows: tuple[Measured, ...]
    not_measured: str = ""
    gpu: bool = True

    def row_for(self, job: JobCost) -> Measured | None:
        """The first row whose keys all agree with the job's."""
        agree = (row for row in self.rows if all(getattr(job, k) == v for k, v in row.key.items()))
        return next(agree, None)

    def hours(self, job: JobCost) -> float | None:
        """The job's hours on the device, a GPU's share of them where ``jobs_per_gpu`` jobs share
        it; ``None`` without a row, or when the job's evaluation images are not known."""
        row = self.row_for(job)
        if row is None or job.eval_images is None:
            return None
        busy = job.training_images * row.train_s_per_image + job.eval_images * row.eval_s_per_image
        return (busy + (row.job_s or 0.0)) / (job.jobs_per_gpu if self.gpu else 1) / 3600

    def as_json(self) -> dict:
        rows = [{**row.key, **dict(zip(Measured._fields[:3], row))} for row in self.rows]
        return {**vars(self), "rows": rows}


def table_from_json(data: Mapping[str, Any]) -> CostTable:
    """The :class:`CostTable` that :meth:`CostTable.as_json` wrote."""
    rows = tuple(
        Measured(
            *(row[name] for name in Measured._fields[:3]), {k: row[k] for k in row if k in KEYS}
        )
        for row in data["rows"]
    )
    return CostTable(data["device"], data["source"], rows, data["not_measured"], data["gpu"])


def table_from_gpu_proof(results: Mapping[str, Any], path: str) -> CostTable | None:
    """The cost table of a full run of ``benchmarks/gpu_proof.py`` (its results file, at
    ``path``): its ``step_time`` part, every algorithm on ResNet-50 at 3 source domains x the
    part's batch, fp32 and bf16, one job on the GPU; evaluation from its predict throughput.
    ``None`` when the part did not pass. A job's start-up and end are not measured there."""
    part = results["parts"].get("step_time", {})
    if results.get("mode") != "full" or part.get("status") != "passed":
        return None
    figures, rows = part["figures"], []
    bf16 = {row["algorithm"]: row for row in figures.get("bf16", [])}
    for row in figures["rows"]:
        images, predict = 3 * row["batch"], 1 / row["predict_examples_per_s"]  # 3 source domains
        key = {"algorithm": row["algorithm"], "network": row["config"], "jobs_per_gpu": 1}
        measures = [("fp32", row["step_ms"], predict)]
        if (fast := bf16.get(row["algorithm"])) is not None:
            measures.append(("bf16", fast["bf16_step_ms"], predict / fast["predict_speedup"]))
        rows += [
            Measured(step_ms / 1000 / images, eval_s, None, key | {"precision": precision})
            for precision, step_ms, eval_s in measures
        ]
    source = f"{path}: {figures['command']}, commit {results['commit']}, {results['date'][:10]}"
    return CostTable(
        results["device"].split(",")[0],
        source,
        tuple(rows),
        "a job's start-up and end (gpu_proof's job_start part has not measured them), data "
        "loading (step_time.py's inputs are on the GPU already)",
    )


def table_from_smoke(results: Mapping[str, Any], path: str) -> CostTable:
    """The cost table of ``dmg-domainbed smoke --json``'s file (at ``path``): one row per job
    that ran, for its algorithm and dataset, measured alone on the device."""
    rows = tuple(
        Measured(
            row["seconds_per_step"] / (row["batch_size"] * row["source_domains"]),
            row["eval_seconds_per_image"],
            row["start_seconds"],
            {"algorithm": row["algorithm"], "dataset": row["dataset"]},
        )
        for row in results["rows"]
        if row["status"] == "ok"
    )
    source = f"{path}: {results['command']}, {results['date'][:10]}"
    return CostTable(results["device"], source, rows, gpu=results["device"].startswith("cuda"))


#: One algorithm on one dataset: its jobs, their images, and their hours on each table's device
#: (``None``: not known, or no measured row matches).
Line = namedtuple("Line", "dataset algorithm jobs training_images eval_images hours")


def _total(values: Iterable[float | None]) -> float | None:
    """The sum of ``values``; ``None`` when one is ``None``."""
    return None if None in (values := list(values)) else sum(values)


def estimate(jobs: Sequence[JobCost], tables: Sequence[CostTable]) -> list[Line]:
    """Per (dataset, algorithm), in the jobs' order: their count, images and hours on each of
    ``tables``' devices (:meth:`CostTable.hours`)."""
    groups: dict[tuple[str, str], list[JobCost]] = {}
    for job in jobs:
        groups.setdefault((job.dataset, job.algorithm), []).append(job)
    return [
        Line(
            *key,
            len(group),
            sum(job.training_images for job in group),
            _total(job.eval_images for job in group),
            tuple(_total(map(table.hours, group)) for table in tables),
        )
        for key, group in groups.items()
    ]


def render(
    lines: Sequence[Line], tables: Sequence[CostTable], jobs: Sequence[JobCost]
) -> list[str]:
    """The cost as the dry run prints it: a table per (dataset, algorithm), the total on one
    line, where each device's figures come from and what no figure covers (each algorithm,
    dataset, network, precision and jobs per GPU no row of a table matches)."""
    from tabulate import tabulate

    def hours(value: float | None) -> str:
        return "no figure" if value is None else f"{value:,.1f}" if value >= 10 else f"{value:.3g}"

    unit = ["GPU-hours" if table.gpu else "hours" for table in tables]
    headers = ["dataset", "algorithm", "jobs", "training images", "evaluation images"]
    headers += [f"{u} [{i + 1}]" for i, u in enumerate(unit)]
    rows = [
        [line.dataset, line.algorithm, line.jobs, f"{line.training_images:,}"]
        + ["unknown" if line.eval_images is None else f"{line.eval_images:,}"]
        + [hours(value) for value in line.hours]
        for line in lines
    ]
    out = ["Cost of the jobs to launch, before any starts:"]
    out += ["  " + text for text in tabulate(rows, headers, disable_numparse=True).splitlines()]
    totals, notes = [], []
    for i, table in enumerate(tables):
        column = [line.hours[i] for line in lines]
        known, left = [value for value in column if value is not None], column.count(None)
        figure = f"{hours(sum(known))} {unit[i]}" if known else "no figure"
        without = f" (+ {left} row(s) without a figure)" if known and left else ""
        totals.append(f"{figure} on {table.device} [{i + 1}]{without}")
        notes.append(f"  [{i + 1}] {table.device}: {table.source}")
        if table.not_measured:
            notes.append(f"      not included, not measured: {table.not_measured}")
        per_gpu = ", {0.jobs_per_gpu} job(s) per GPU" if table.gpu else ""
        what = "      no figure for {0.algorithm} on {0.dataset}: {0.network}, {0.precision}"
        notes += dict.fromkeys((what + per_gpu).format(j) for j in jobs if table.row_for(j) is None)
    jobs_total = sum(line.jobs for line in lines)
    out.append(f"  total: {jobs_total:,} jobs; " + ("; ".join(totals) or "no measured figures"))
    out.append(
        "  training images: steps x batch x source domains; evaluation images: checkpoints x "
        "every image of every domain (train.py evaluates each split of each domain)"
    )
    return out + notes


def packaged_table() -> CostTable | None:
    """The package's table, generated from ``docs/gpu_proof.json`` by ``docs/generate.py``
    (``None`` when no GPU run is recorded)."""
    data = json.loads((Path(__file__).parent / "cost_table.json").read_text())
    return None if data is None else table_from_json(data)


def load_table(path: str) -> CostTable:
    """A smoke results file (``dmg-domainbed smoke --json``) as a :class:`CostTable`; a
    ``ValueError`` naming what is wrong with it otherwise."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or data.get("kind") != "smoke":
        raise ValueError("it is not a results file of `dmg-domainbed smoke --json`")
    try:
        return table_from_smoke(data, path)
    except KeyError as missing:
        raise ValueError(
            f"it lacks {missing}: write it again with this version's `smoke --json`"
        ) from None
