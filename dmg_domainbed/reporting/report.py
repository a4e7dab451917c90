"""``report``: a sweep's results as CSV, Markdown and PNG files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from dmg_domainbed.errors import UserError
from dmg_domainbed.reporting import plots, tables
from dmg_domainbed.reporting.markdown import markdown_table
from dmg_domainbed.reporting.runs import require_sweep
from dmg_domainbed.reporting.style import save


@dataclass
class SweepReport:
    """What :func:`write_report` produced: the tables and the files written."""

    results: pd.DataFrame
    averages: pd.DataFrame
    files: list[Path]


def check_output_dir(output_dir: Path, *inputs: Path) -> Path:
    """``output_dir``, unless it lies inside a folder the report reads (which stays untouched)."""
    resolved = output_dir.resolve()
    for folder in inputs:
        if resolved == folder.resolve() or folder.resolve() in resolved.parents:
            raise UserError(
                f"output folder '{output_dir}' lies inside the input folder '{folder}', which "
                "is only read. Choose an --output_dir outside it."
            )
    return output_dir


def results_markdown(results: pd.DataFrame, averages: pd.DataFrame) -> str:
    """Every table of collect_results, in its order, as Markdown sections."""
    parts = [
        "# Results\n",
        "Test-domain accuracy (%), mean +/- standard error over trial seeds, as printed by "
        "`python -m domainbed.scripts.collect_results`. X: no result (leave-one-domain-out "
        "selection needs runs that hold out two domains; `--single_test_envs` sweeps have "
        "none).\n",
    ]
    for method in results["selection_method"].unique():
        parts.append(f"## Model selection: {method}\n")
        of_method = results[results["selection_method"] == method]
        for dataset in of_method["dataset"].unique():
            parts.append(f"### {dataset}\n")
            table = tables.wide_table(of_method[of_method["dataset"] == dataset])
            parts.append(markdown_table(table, "Algorithm"))
        parts.append("### Averages\n")
        table = tables.wide_table(averages[averages["selection_method"] == method], "dataset")
        parts.append(markdown_table(table, "Algorithm"))
    return "\n".join(parts)


def write_report(sweep_dir: str | Path, output_dir: str | Path) -> SweepReport:
    """Tables (``results.csv``, ``averages.csv``, ``results.md``) and pictures
    (``accuracy_<dataset>.png``, ``dmg_diagnostics_<dataset>.png``) of a sweep."""
    from domainbed import datasets

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
    files[2].write_text(results_markdown(results, averages))
    for dataset in results["dataset"].unique():
        files.append(
            save(plots.accuracy_figure(results, dataset), output / f"accuracy_{dataset}.png")
        )
        runs = plots.diagnostic_runs(records, dataset)
        if runs:
            environments = datasets.get_dataset_class(dataset).ENVIRONMENTS
            files.append(
                save(
                    plots.dmg_diagnostics_figure(runs, environments),
                    output / f"dmg_diagnostics_{dataset}.png",
                )
            )
    return SweepReport(results=results, averages=averages, files=files)
