"""A sweep's report: collect_results' numbers, the selected hparams, paired comparisons and
ranks, as CSV and Markdown, and its pictures (drawn with :mod:`dmg_domainbed.drawing`)."""

from __future__ import annotations

import hashlib
import re
from collections import Counter, namedtuple
from collections.abc import Iterable, Sequence
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from dmg_domainbed import runs as run_files
from dmg_domainbed.algorithms.base import declarations_of
from dmg_domainbed.drawing import colours, figure, save
from dmg_domainbed.errors import UserError
from dmg_domainbed.folders import path_part
from dmg_domainbed.reporting import comparisons as paired
from dmg_domainbed.reporting import ranks, soups, tables
from dmg_domainbed.reporting.jobs import SweepJobs, renamed, sweep_jobs
from dmg_domainbed.reporting.outputs import check_output_dir, write_files
from dmg_domainbed.reporting.tables import AVERAGE
from dmg_domainbed.shortlist import shortlist

NAMED_BARS = 6  # flagged bars named under the panels; more are counted
RESULTS = ("results.csv", "averages.csv", "results.md", "selected_hparams.csv")


#: What :func:`write_report` produced: the results tables as Markdown, what ``report`` prints
#: after them (:func:`summary`), the files written, the sweep's jobs and its ranked runs.
SweepReport = namedtuple("SweepReport", "tables summary files jobs ranked")


def summary(status: str, names, reference, comparisons: pd.DataFrame, found) -> str:
    """What ``report`` prints after the results: jobs and flags (``status``), comparisons and
    ranks (``found``) of the algorithms ``names``."""
    compared = (
        f"Paired comparisons left out: {paired.DEFAULT_REFERENCE}, the default reference, is "
        f"not in this sweep. Pass --reference with one of: {', '.join(names)}."
    )
    if reference is None and not comparisons.empty:  # soups with their runs alone
        compared = (
            f"{compared}\nSoups paired with their runs (comparisons.md has each test "
            "domain):\n" + paired.brief(comparisons)
        )
    elif reference is not None and comparisons.empty:
        compared = f"Paired comparisons: no other algorithm shares a dataset with {reference}."
    elif reference is not None:
        compared = (
            "Paired comparisons over each dataset (test accuracy, percentage points; "
            "comparisons.md has each test domain):\n" + paired.brief(comparisons)
        )
    ranked = "\n".join(
        f"  {r.selection_method}: "
        + ", ".join(f"{name} {rank:.2f}" for name, rank in r.average_ranks.items())
        + f". {ranks.summary(r)}"
        for r in found
    )
    return f"{status}\n\n{compared}\n\nAverage ranks across tasks (1 = best):\n{ranked}"


def first_runs(records, dataset: str, algorithm: str) -> list[list[dict]]:
    """Per set of test envs, the records (by step) of the lowest (hparams, trial) seeds' run."""
    pair = (dataset, algorithm)
    own = [r for r in records if (r["args"]["dataset"], r["args"]["algorithm"]) == pair]
    first: dict[tuple, str] = {}  # test envs -> the folder of their first run
    for record in sorted(own, key=lambda r: (r["args"]["hparams_seed"], r["args"]["trial_seed"])):
        first.setdefault(tuple(record["args"]["test_envs"]), record["args"]["output_dir"])
    return [
        sorted((r for r in own if r["args"]["output_dir"] == first[envs]), key=lambda r: r["step"])
        for envs in sorted(first)
    ]


def pictures_of(
    results: pd.DataFrame, records, comparisons: pd.DataFrame, trained: dict[str, str]
) -> dict[str, Figure]:
    """File name -> figure: ``accuracy_<dataset>.png``, ``<algorithm>_diagnostics_<dataset>.png``
    where the class each name ``trained`` draws its diagnostics."""
    from domainbed import algorithms, datasets

    drawn, parts = {}, picture_parts(trained)
    shown = results[~results["selection_method"].isin(tables.without_results(results))]
    shown = shown if len(shown) else results
    for dataset in results["dataset"].unique():
        own = records.filter_equals("args.dataset", dataset)
        pairs = comparisons[comparisons["dataset"] == dataset]
        of_dataset = shown[shown.algorithm.isin(set(own.select("args.algorithm")))]
        drawn[f"accuracy_{path_part(dataset)}.png"] = accuracy_figure(of_dataset, dataset, pairs)
        environments = datasets.get_dataset_class(dataset).ENVIRONMENTS
        # Each algorithm as the tables name it, drawn by the class it trained.
        for algorithm in tables.ordered_algorithms(own):
            if trained.get(algorithm) not in algorithms.ALGORITHMS:  # a soup draws none
                continue
            declared = declarations_of(algorithms.get_algorithm_class(trained[algorithm]))
            runs = first_runs(records, dataset, algorithm)
            if (curves := declared.training_curves(runs, environments)) is not None:
                drawn[f"{parts[algorithm]}_diagnostics_{path_part(dataset)}.png"] = curves
    return drawn


def picture_parts(names: Iterable[str]) -> dict[str, str]:
    """Each name as part of a file name without signs a shell would quote (``DMG (bf16,
    lr=0.05)``: ``dmg-bf16-lr-0.05``); a part shared or empty gets a hash of the name."""
    plain = {name: re.sub(r"[^0-9a-z._]+", "-", name.lower()).strip("-.") for name in names}
    shared = Counter(plain.values())
    return {
        name: part
        if part and shared[part] == 1
        else f"{part or 'x'}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
        for name, part in plain.items()
    }


def accuracy_figure(results: pd.DataFrame, dataset: str, comparisons: pd.DataFrame) -> Figure:
    """Per selection method with results, the mean test accuracy per test domain and algorithm
    and, where ``comparisons`` has any, each paired difference to the reference, with intervals."""
    frame = results[results["dataset"] == dataset]
    every, empty = list(frame["selection_method"].unique()), tables.without_results(frame)
    methods = [method for method in every if method not in empty] or every
    algorithms, domains = list(frame["algorithm"].unique()), list(frame["test_domain"].unique())
    palette, positions = colours(algorithms), np.arange(len(domains))
    compared = len(comparisons) > 0
    width = max(6.5, 0.32 * len(algorithms) * len(domains) + 2.5)
    fig = figure(width * (1.8 if compared else 1), 2.8 * len(methods) + 0.6)
    axes = fig.subplots(len(methods), 2 if compared else 1, sharex=True, squeeze=False)
    for row, method in enumerate(methods):
        panel = frame[frame["selection_method"] == method]
        low, high = panel["accuracy"] - panel["stderr"], panel["accuracy"] + panel["stderr"]
        title = f"{method}: test accuracy", "mean over trials, error bars: standard error"
        draw = (algorithms, domains, palette, "accuracy", *title, "test accuracy (%)")
        _bars(axes[row, 0], panel.assign(low=low, high=high), *draw)
        axes[row, 0].set_ylim(0, 125)  # above 100: room for the values
        axes[row, 0].set_yticks(range(0, 101, 20))
        if compared:
            rows = comparisons[comparisons["selection_method"] == method]
            rows = rows.rename(columns={"ci_low": "low", "ci_high": "high"})
            reference = rows["reference"].iloc[0] if len(rows) else ""
            title = f"difference to {reference} (points)", "error bars: 95% interval"
            _bars(axes[row, 1], rows, algorithms, domains, palette, "difference", *title, "points")
            axes[row, 1].axhline(0, color="black", linewidth=0.8)
    labels = ["average" if d == AVERAGE else str(d) for d in domains]
    for axis in axes[-1]:
        axis.set_xticks(positions, labels)
        axis.set_xlabel(f"{dataset}: test domain (held out during training)")
    handles = [Patch(color=palette[name], label=name) for name in algorithms]
    place = dict(loc="lower left", bbox_to_anchor=(0, 1.12), frameon=False)
    axes[0, 0].legend(handles=handles, ncols=min(len(algorithms), 6), **place)
    notes, shown = [], frame[frame["selection_method"].isin(methods)]
    for flag, rows in tables.flag_marks(shown).items():
        cells = shown[rows & (shown["test_env"] != AVERAGE)]
        named = sorted({f"{a} ({d})" for a, d in zip(cells["algorithm"], cells["test_domain"])})
        notes += [f"{flag}: {shortlist(named, NAMED_BARS)}"] if named else []
    if empty and len(empty) < len(every):
        notes.insert(0, f"no result (X in the tables) for: {'; '.join(empty)}")
    if notes:
        fig.supxlabel("\n".join(notes), fontsize=8, color="dimgray")
    return fig


def _bars(axis, rows, algorithms, domains, palette, value, title, error_bars, label) -> None:
    """Bars of ``value``, error bars from ``low`` to ``high`` where known, values beyond them."""
    counts = rows["n_trials"].dropna().astype(int)  # an average over test domains has none
    if len(counts) and (counts < 2).all():
        error_bars = paired.NO_INTERVAL
    elif (counts < 2).any():
        error_bars += f"; a cell of {paired.NO_INTERVAL}"
    axis.set_title(f"{title}, {error_bars}", fontsize=10)
    axis.set_ylabel(label)
    sign, width = "" if value == "accuracy" else "+", 0.8 / len(algorithms)
    for algorithm in [name for name in algorithms if name in set(rows["algorithm"])]:
        own = rows[rows["algorithm"] == algorithm].set_index("test_domain").reindex(domains)
        heights, low, high = (own[c].astype(float).to_numpy() for c in (value, "low", "high"))
        offset = (algorithms.index(algorithm) - (len(algorithms) - 1) / 2) * width
        x = np.arange(len(domains)) + offset
        for with_interval in (True, False):  # the bars without one get no error bar at all
            part = ~np.isnan(heights) & (~np.isnan(low) == with_interval)
            style = dict(color=palette[algorithm])
            if with_interval:
                errors = np.array([heights - low, high - heights])[:, part]
                style |= dict(yerr=errors, capsize=2, error_kw=dict(elinewidth=0.8))
            drawn = axis.bar(x[part], heights[part], width, **style)
            axis.bar_label(drawn, fmt=f"{{:{sign}.1f}}", padding=2, rotation=90, fontsize=7)
    if value != "accuracy" and axis.patches:  # differences: room beyond the bars' values
        (_, bottom), (_, top) = axis.dataLim.get_points()  # the bars' and error bars' ends, 0
        span = top - bottom or 1.0
        axis.set_ylim(bottom - 0.3 * span * (bottom < 0), top + 0.3 * span)
    axis.grid(axis="y", alpha=0.3)
    axis.set_axisbelow(True)


def write_report(
    sweep_dirs: Sequence[str | Path],
    output_dir: str | Path,
    reference: str | None = None,
    soups_dir: str | Path | None = None,
) -> SweepReport:
    """Everything ``report`` writes for a sweep, or several reported together (docs/reports.md),
    computed, then written through :func:`.outputs.write_files`; with ``soups_dir``, their soups in
    rows of their own, each also compared with its runs."""
    from domainbed.lib.query import Q

    sweeps = [run_files.require_sweep(folder) for folder in sweep_dirs]
    output = check_output_dir(Path(output_dir), *sweeps)
    jobs = sweep_jobs(*sweeps)
    souped = read_soups(soups_dir, sweeps, jobs) if soups_dir is not None else []
    records = Q([*jobs.records(), *souped])
    names = tables.ordered_algorithms(records)
    if reference is None:
        reference = paired.DEFAULT_REFERENCE if paired.DEFAULT_REFERENCE in names else None
    elif reference not in names:
        raise UserError(
            f"--reference '{reference}' is not an algorithm of {_named(sweeps)}, which has "
            f"{', '.join(names)}. Give one of those."
        )
    diverged = {job.records[-1]["args"]["output_dir"]: job.diverged for job in jobs.diverged()}
    ranked = tables.ranked_runs(records, diverged)
    results, averages = tables.results_frames(records, ranked, jobs)
    notes = [jobs.summary(), *jobs.names_notes(), tables.flags_summary(results, jobs)]
    if souped:
        notes.append(
            f"Soups: {len(souped)} soups and ensembles of the sweep's runs, read from "
            f"'{soups_dir}' (dmg-domainbed soup), each in rows of its own, never pooled with "
            "single runs; one model per trial, so every selection method selects it."
        )
    status = "\n".join(filter(None, notes))
    chosen = tables.selected_frame(ranked)
    pairs = [(reference, names)] if reference else []  # (reference, the algorithms compared)
    made_of = {record[soups.SOUP]["name"]: record[soups.SOUP]["of"] for record in souped}
    for single in sorted(set(made_of.values()) - {reference}):  # each soup with its runs
        pairs.append((single, [single, *(name for name, of in made_of.items() if of == single)]))
    compared = [paired.compare(chosen, *pair) for pair in pairs]
    compared = pd.concat(compared) if compared else pd.DataFrame(columns=paired.COLUMNS)
    comparisons = paired.flag_comparisons(compared.reset_index(drop=True), chosen)
    found = ranks.rankings(chosen, names)
    diagram = ranks.ranks_figure(found)
    # The pictures' differences: to the reference alone (a soup's to its runs are in the tables).
    drawn = comparisons[comparisons["reference"] == reference]
    figures = pictures_of(results, records, drawn, jobs.trained_algorithms())

    markdown = tables.results_markdown(results, averages)
    tables_of = (results, averages, f"{markdown}\n{status}\n", tables.selected_hparams(chosen))
    written = dict(zip(RESULTS, tables_of, strict=True))
    if len(comparisons):
        written |= {"comparisons.csv": comparisons, "comparisons.md": paired.markdown(comparisons)}
    written |= {"ranks.csv": ranks.ranks_frame(found), "ranks.md": ranks.ranks_markdown(found)}
    figures = {"ranks.png": diagram, **figures} if diagram is not None else figures
    written |= {name: partial(save, drawn) for name, drawn in figures.items()}
    written = write_files(output, written)
    said = summary(status, names, reference, comparisons, found)
    return SweepReport(markdown, said, written, jobs, ranked)


def read_soups(soups_dir: str | Path, sweeps: Sequence[Path], jobs: SweepJobs) -> list[dict]:
    """The records of ``sweeps``' soups in ``soups_dir`` (:func:`.soups.write_soups`), each
    named after what this report calls the runs it was made of (``soup`` named them within their
    own sweep; read beside another sweep, they may be named otherwise)."""
    path = Path(soups_dir) / soups.RECORDS
    records = run_files.read_records(path) if path.is_file() else []
    if not records or any(isinstance(r, dict) and soups.SOUP not in r for r in records):
        raise UserError(
            f"--soups '{soups_dir}' does not hold soups as 'dmg-domainbed soup' writes them "
            f"(their records in {soups.RECORDS}). Give the --output_dir of dmg-domainbed soup."
        )
    for number, record in enumerate(records, start=1):
        wrong = run_files.wrong_field(record, run_files.SWEEP)
        if (wrong := wrong or soups.soup_problem(record[soups.SOUP])) is not None:
            raise UserError(
                f"'{path}' line {number} is not a soup's record as 'dmg-domainbed soup' writes "
                f"it: {wrong}. Make the soups again with dmg-domainbed soup."
            )
    run_files.check_environments(records, path)
    folders = {sweep.resolve() for sweep in sweeps}
    reported = {
        job.folder.resolve(): job.records[-1]["args"]["algorithm"]
        for job in jobs.jobs
        if job.records
    }
    named = []
    for record in records:
        soup = record[soups.SOUP]
        if outside := [run for run in soup["runs"] if Path(run).resolve().parent not in folders]:
            raise UserError(
                f"--soups '{soups_dir}' holds a soup ({soup['name']}) of runs of "
                f"another sweep than {_named(sweeps, '')}, e.g. '{outside[0]}': its rows would "
                "be compared with runs it was not made of. Give the soups of this sweep "
                f"(dmg-domainbed soup --input_dir {sweeps[0]}), or the sweep those soups were "
                "made of."
            )
        of = reported.get(Path(soup["runs"][0]).resolve(), soup["of"])
        soup = {**soup, "of": of, "name": soups.soup_name(of, soup["mode"])}
        named.append(
            renamed({**record, soups.SOUP: soup}, soup["name"], Path(record["args"]["output_dir"]))
        )
    return named


def _named(sweeps: Sequence[Path], kind: str = "the sweep") -> str:
    """``the sweep 'a'``, or ``the sweeps 'a', 'b'`` (``kind`` ``''``: ``'a', 'b'``)."""
    kind += "s " if kind and len(sweeps) > 1 else " " if kind else ""
    return kind + ", ".join(f"'{sweep}'" for sweep in sweeps)
