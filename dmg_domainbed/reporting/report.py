"""A sweep's report: collect_results' numbers as CSV and Markdown, and its pictures."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from dmg_domainbed.algorithms.base import training_curves
from dmg_domainbed.drawing import save
from dmg_domainbed.errors import UserError
from dmg_domainbed.reporting import pictures, tables
from dmg_domainbed.reporting.files import check_output_dir
from dmg_domainbed.reporting.runs import require_sweep


@dataclass
class SweepReport:
    """What :func:`write_report` produced: the tables and the files written."""

    results: pd.DataFrame
    averages: pd.DataFrame
    files: list[Path]


def first_runs(records, dataset: str, algorithm: str) -> list[list[dict]]:
    """The runs of ``algorithm`` on ``dataset``: for each set of test environments, the records
    (by step) of the run with the lowest (hparams_seed, trial_seed), i.e. default hparams when
    the sweep has them."""
    runs: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        args = record["args"]
        if args["algorithm"] == algorithm and args["dataset"] == dataset:
            runs[args["output_dir"]].append(record)

    def rank(run: list[dict]) -> tuple[int, int]:
        return run[0]["args"]["hparams_seed"], run[0]["args"]["trial_seed"]

    chosen: dict[tuple, list[dict]] = {}
    for run in runs.values():
        key = tuple(run[0]["args"]["test_envs"])
        if key not in chosen or rank(run) < rank(chosen[key]):
            chosen[key] = run
    return [sorted(chosen[key], key=lambda r: r["step"]) for key in sorted(chosen)]


def write_report(sweep_dir: str | Path, output_dir: str | Path) -> SweepReport:
    """Tables (``results.csv``, ``averages.csv``, ``results.md``) and pictures of a sweep:
    ``accuracy_<dataset>.png``, and ``<algorithm>_diagnostics_<dataset>.png`` for each algorithm
    that draws its diagnostics over training (e.g. DMG)."""
    from domainbed import algorithms, datasets

    sweep = require_sweep(sweep_dir)
    output = check_output_dir(Path(output_dir), sweep)
    records = tables.load_sweep_records(sweep)
    results = tables.results_frame(records)
    averages = tables.averages_frame(records)
    if results.empty:
        raise UserError(
            f"the runs in '{sweep}' are of datasets DomainBed does not list "
            f"({sorted(records.select('args.dataset').unique())}); collect_results would "
            "print no table either."
        )
    output.mkdir(parents=True, exist_ok=True)
    files = [output / "results.csv", output / "averages.csv", output / "results.md"]
    results.to_csv(files[0], index=False)
    averages.to_csv(files[1], index=False)
    files[2].write_text(tables.results_markdown(results, averages))
    for dataset in results["dataset"].unique():
        accuracy = pictures.accuracy_figure(results, dataset)
        files.append(save(accuracy, output / f"accuracy_{dataset}.png"))
        environments = datasets.get_dataset_class(dataset).ENVIRONMENTS
        for algorithm in results[results["dataset"] == dataset]["algorithm"].unique():
            if algorithm not in algorithms.ALGORITHMS:
                continue
            cls = algorithms.get_algorithm_class(algorithm)
            curves = training_curves(cls, first_runs(records, dataset, algorithm), environments)
            if curves is not None:
                path = output / f"{algorithm.lower()}_diagnostics_{dataset}.png"
                files.append(save(curves, path))
    return SweepReport(results=results, averages=averages, files=files)
