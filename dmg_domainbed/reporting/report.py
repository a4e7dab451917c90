"""A sweep's report: collect_results' numbers, the selected hparams, paired comparisons and
ranks, as CSV and Markdown, and its pictures."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from dmg_domainbed.algorithms.base import declarations_of
from dmg_domainbed.drawing import save
from dmg_domainbed.errors import UserError
from dmg_domainbed.reporting import cell_flags, pictures, ranks, selected, tables
from dmg_domainbed.reporting.comparisons import (
    DEFAULT_REFERENCE,
    compare,
    comparisons_markdown,
    flag_comparisons,
)
from dmg_domainbed.reporting.comparisons import brief as comparisons_brief
from dmg_domainbed.reporting.files import check_output_dir
from dmg_domainbed.reporting.jobs import SweepJobs, sweep_jobs
from dmg_domainbed.reporting.runs import require_sweep


@dataclass
class SweepReport:
    """What :func:`write_report` produced: the tables, the sweep's jobs and the files written."""

    results: pd.DataFrame
    averages: pd.DataFrame
    ranked: pd.DataFrame
    comparisons: pd.DataFrame
    rankings: list[ranks.Ranking]
    reference: str | None
    files: list[Path]
    jobs: SweepJobs
    status: str  # the jobs' states and what the flags in the tables mean

    def summary(self) -> str:
        """What ``report`` prints after the results: the jobs' states and the flags, the
        comparisons over each dataset (or why there are none) and the ranks."""
        if self.reference is None:
            names = ", ".join(self.results["algorithm"].unique())
            compared = (
                f"Paired comparisons left out: {DEFAULT_REFERENCE}, the default reference, is "
                f"not in this sweep. Pass --reference with one of: {names}."
            )
        elif self.comparisons.empty:
            compared = (
                f"Paired comparisons: no other algorithm shares a dataset with {self.reference}."
            )
        else:
            compared = (
                "Paired comparisons over each dataset (test accuracy, percentage points; "
                "comparisons.md has each test domain):\n" + comparisons_brief(self.comparisons)
            )
        ranked = "\n".join(
            f"  {r.selection_method}: "
            + ", ".join(f"{name} {rank:.2f}" for name, rank in r.average_ranks.items())
            + f". {ranks.summary(r)}"
            for r in self.rankings
        )
        return f"{self.status}\n\n{compared}\n\nAverage ranks across tasks (1 = best):\n{ranked}"


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


def pictures_of(results: pd.DataFrame, records) -> dict[str, Figure]:
    """File name -> figure: ``accuracy_<dataset>.png`` per dataset, and
    ``<algorithm>_diagnostics_<dataset>.png`` for each algorithm that draws its diagnostics
    over training, from its own runs on that dataset."""
    from domainbed import algorithms, datasets

    drawn = {}
    shown = results[~results["selection_method"].isin(tables.without_results(results))]
    shown = shown if len(shown) else results
    for dataset in results["dataset"].unique():
        own = set(records.filter_equals("args.dataset", dataset).select("args.algorithm"))
        drawn[f"accuracy_{dataset}.png"] = pictures.accuracy_figure(
            shown[shown["algorithm"].isin(own)], dataset
        )
        environments = datasets.get_dataset_class(dataset).ENVIRONMENTS
        for algorithm in [name for name in algorithms.ALGORITHMS if name in own]:
            runs = first_runs(records, dataset, algorithm)
            declared = declarations_of(algorithms.get_algorithm_class(algorithm))
            curves = declared.training_curves(runs, environments)
            if curves is not None:
                drawn[f"{algorithm.lower()}_diagnostics_{dataset}.png"] = curves
    return drawn


def write_report(
    sweep_dir: str | Path, output_dir: str | Path, reference: str | None = None
) -> SweepReport:
    """Everything ``report`` writes for a sweep:

    * ``results.csv``, ``averages.csv``, ``results.md``: collect_results' numbers (in the
      Markdown, a selection method without any result is one line, not a table of X), each
      cell flagged ``partial`` or ``diverged`` where it is (:mod:`.cell_flags`), and the state
      of the sweep's jobs (:mod:`.jobs`);
    * ``selected_hparams.csv``: the run, hparams and step each selection method selected;
    * ``comparisons.csv`` / ``.md``: every algorithm paired with ``reference`` (default ERM
      when the sweep has it), see :mod:`.comparisons`;
    * ``ranks.csv`` / ``.md`` and, with enough tasks, ``ranks.png`` (:mod:`.ranks`);
    * ``accuracy_<dataset>.png``, and ``<algorithm>_diagnostics_<dataset>.png`` for each
      algorithm that draws its diagnostics over training (e.g. DMG).

    Everything is computed before the first file is written: a :class:`UserError` (e.g. a
    ``reference`` the sweep does not have) leaves the output folder as it was.
    """
    sweep = require_sweep(sweep_dir)
    output = check_output_dir(Path(output_dir), sweep)
    jobs = sweep_jobs(sweep)
    records = jobs.records()
    names = tables.ordered_algorithms(records)
    reference = _reference(reference, names, sweep)
    results = tables.results_frame(records)
    if results.empty:
        raise UserError(
            f"the runs in '{sweep}' are of datasets DomainBed does not list "
            f"({sorted(records.select('args.dataset').unique())}); collect_results would "
            "print no table either."
        )
    results = cell_flags.flag_results(results, jobs)
    averages = cell_flags.flag_averages(tables.averages_frame(records), results)
    status = "\n".join(filter(None, [jobs.summary(), cell_flags.flags_summary(results, jobs)]))
    diverged = {job.records[-1]["args"]["output_dir"]: job.diverged for job in jobs.diverged()}
    ranked = selected.ranked_runs(records, diverged)
    chosen = selected.selected_frame(ranked)
    comparisons = compare(chosen, reference, names) if reference else pd.DataFrame()
    if len(comparisons):
        comparisons = flag_comparisons(comparisons, chosen)
    found = ranks.rankings(chosen, names)
    diagram = ranks.ranks_figure(found)
    figures = pictures_of(results, records)

    output.mkdir(parents=True, exist_ok=True)
    files = [output / "results.csv", output / "averages.csv", output / "results.md"]
    results.to_csv(files[0], index=False)
    averages.to_csv(files[1], index=False)
    files[2].write_text(f"{tables.results_markdown(results, averages)}\n{status}\n")
    files.append(output / "selected_hparams.csv")
    selected.selected_hparams(chosen).to_csv(files[-1], index=False)
    if len(comparisons):
        files += _write(comparisons, comparisons_markdown(comparisons), output, "comparisons")
    files += _write(ranks.ranks_frame(found), ranks.ranks_markdown(found), output, "ranks")
    if diagram is not None:
        files.append(save(diagram, output / "ranks.png"))
    files += [save(drawn, output / name) for name, drawn in figures.items()]
    return SweepReport(
        results, averages, ranked, comparisons, found, reference, files, jobs, status
    )


def _reference(reference: str | None, names: list[str], sweep: Path) -> str | None:
    """The algorithm to compare with: ``reference`` if the sweep has it, else ERM if present."""
    if reference is None:
        return DEFAULT_REFERENCE if DEFAULT_REFERENCE in names else None
    if reference not in names:
        raise UserError(
            f"--reference '{reference}' is not an algorithm of the sweep '{sweep}', which has "
            f"{', '.join(names)}. Give one of those."
        )
    return reference


def _write(frame: pd.DataFrame, markdown: str, output: Path, stem: str) -> list[Path]:
    paths = [output / f"{stem}.csv", output / f"{stem}.md"]
    frame.to_csv(paths[0], index=False)
    paths[1].write_text(markdown)
    return paths
