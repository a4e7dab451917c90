"""After a sweep, its runs only read: ``report``, ``soup``, ``evaluate``, ``select``, ``masks``."""

from __future__ import annotations

import argparse
import os
import shlex
from functools import partial
from pathlib import Path

from dmg_domainbed.cli import add_output_dir, command
from dmg_domainbed.errors import UserError
from dmg_domainbed.runs import read_run, require_model, require_sweep

MODES = ("ensemble", "uniform", "greedy")  # reporting.soups.MODES, without importing torch

RUNS_DATA_DIR = (
    "dataset folder, if not the one the runs were trained with (not for a manifest dataset, "
    "whose manifest names its folder)"
)


def add_parsers(subparsers) -> None:
    add = partial(command, subparsers)
    report = add(
        "report",
        report_command,
        "tables (CSV, Markdown), comparisons and pictures of a DomainBed sweep",
    )
    report.add_argument(
        "--input_dir",
        required=True,
        nargs="+",
        help=(
            "the --output_dir of domainbed.scripts.sweep; several: their runs reported "
            "together, those of one algorithm that differ in fixed hparams in rows of their own"
        ),
    )
    add_output_dir(report, "dmg_report", "where the report goes")
    report.add_argument(
        "--reference",
        help="the algorithm every other one is compared with (default: ERM, when in the sweep)",
    )
    report.add_argument(
        "--tensorboard",
        type=Path,
        metavar="DIR",
        help=(
            "also write every run's logged scalars and its hparams, with the test accuracy "
            "each selection method takes from it, as TensorBoard logs into DIR (a new or "
            "empty folder; needs pip install 'dmg-domainbed[tensorboard]'); view them with "
            "tensorboard --logdir DIR"
        ),
    )
    report.add_argument(
        "--soups",
        type=Path,
        metavar="DIR",
        help=(
            "also report the soups 'dmg-domainbed soup' wrote into DIR, each in rows of its "
            "own (e.g. 'ERM (soup: greedy)') and compared with the runs it was made of"
        ),
    )

    soup = add(
        "soup", soup_command, "weight soups (uniform, greedy) and logit ensembles of a sweep's runs"
    )
    soup.add_argument("--input_dir", required=True, help="the sweep folder (DomainBed's)")
    add_output_dir(soup, "dmg_soup", "where the soups go")
    soup.add_argument(
        "--modes",
        nargs="+",
        choices=MODES,
        default=list(MODES),
        help="which soups to make (default: all)",
    )
    soup.add_argument("--data_dir", help=RUNS_DATA_DIR)

    evaluate = add(
        "evaluate",
        evaluate_command,
        "in-domain accuracy of finished runs, predict vs known-domain (paper Table 3)",
    )
    evaluate.add_argument(
        "--run_dir",
        required=True,
        nargs="+",
        metavar="RUN",
        help="folder(s) of finished training runs (each holds model.pkl)",
    )
    add_output_dir(
        evaluate,
        None,
        "where the tables go (default: RUN/dmg_evaluate beside the run's files, or, for "
        "several runs, dmg_evaluate in the folder that holds them, e.g. their sweep's)",
    )
    evaluate.add_argument("--data_dir", help=RUNS_DATA_DIR)

    select = add(
        "select",
        select_command,
        "select checkpoints by known-domain source validation accuracy (the paper's way)",
    )
    select.add_argument("--input_dir", required=True, help="the sweep folder (DomainBed's)")
    add_output_dir(select, "dmg_select", "where the tables go")
    select.add_argument("--data_dir", help=RUNS_DATA_DIR)

    masks = add(
        "masks",
        masks_command,
        "pictures of what a finished run learned (DMG's masks, ImportanceMask's weights)",
    )
    masks.add_argument(
        "--run_dir", required=True, metavar="RUN", help="folder of a finished run (holds model.pkl)"
    )
    add_output_dir(
        masks,
        None,
        "where the pictures and tables go (default: RUN/dmg_masks, beside the run's files)",
    )


def _print_written(written) -> None:
    """The tables an evaluation of runs wrote, its notes and its files."""
    for title, table in written.sections:
        print(f"{title}\n\n{table.to_string()}")
    for note in written.notes:
        print(f"\n{note}")
    _print_files(written.files)


def _print_files(files) -> None:
    folder = Path(files[0]).parent
    print(f"\nWrote into {folder}: {', '.join(Path(p).name for p in files)}")


def _beside(runs, name: str, given: Path | None) -> Path:
    """Once every run has its model (:func:`.runs.require_model`): ``given``, else folder
    ``name`` beside the runs: inside the one run, or in the folder that holds them all (their
    sweep's), or else inside the first run, unless a link is there; checked
    (:func:`.outputs.check_output_dir`)."""
    from dmg_domainbed.reporting.outputs import check_output_dir

    for run in runs:
        require_model(run)
    if given is not None:
        return check_output_dir(given, *(run.path for run in runs))
    parents = {run.path.resolve().parent for run in runs}
    home = parents.pop() if len(runs) > 1 and len(parents) == 1 else runs[0].path
    if (home / name).is_symlink():
        raise UserError(
            f"'{home / name}' is a link (to '{os.readlink(home / name)}'), where this command "
            f"writes by default. It writes into run and sweep folders only what it makes "
            "there, never through a link found in them (a run from elsewhere can point one "
            "anywhere). Nothing was written. Remove the link, or give --output_dir."
        )
    return check_output_dir(home / name)


def report_command(args: argparse.Namespace) -> int:
    """Reads a DomainBed sweep folder and writes the numbers of collect_results for every
    model-selection method (results.csv, averages.csv, results.md), the run, hparams and step
    each method selected (selected_hparams.csv), every algorithm paired with a reference on the
    same data splits, with 95% confidence intervals (comparisons.csv, comparisons.md), average
    ranks across tasks with a Friedman test and a critical-difference diagram when there are
    enough tasks (ranks.csv, ranks.md, ranks.png), test accuracy per test domain by algorithm
    (accuracy_<dataset>.png) and, for algorithms that log diagnostics (DMG's masks), their
    curves over training (<algorithm>_diagnostics_<dataset>.png). The sweep folder is only
    read."""
    sweeps = [require_sweep(folder) for folder in args.input_dir]
    from dmg_domainbed.reporting import tensorboard
    from dmg_domainbed.reporting.report import write_report

    log_dir = tensorboard.check_log_dir(args.tensorboard, *sweeps) if args.tensorboard else None
    written = write_report(sweeps, args.output_dir, args.reference, args.soups)
    print(written.tables)
    print(written.summary)
    _print_files(written.files)
    if log_dir is not None:
        names = tensorboard.export(written.jobs, written.ranked, log_dir)
        print(f"TensorBoard: {len(names)} runs in {log_dir}; view them with:")
        print(f"  tensorboard --logdir {shlex.quote(str(log_dir))}")
    return 0


def soup_command(args: argparse.Namespace) -> int:
    """For each algorithm, dataset, test domain and trial of a DomainBed sweep, makes one model
    of all its finished runs (every hparams seed): 'ensemble' averages their logits (EoA);
    'uniform' averages their weights (model soups, DiWA); 'greedy' adds runs, best first, while
    the average's training-domain validation accuracy does not fall (greedy soup). Weights are
    averaged only for runs trained with one shared init_seed hparam; other runs are refused,
    named. Writes soups.jsonl (a record per soup, read by report --soups), <id>.pkl (a weight
    soup's model, saved as train.py saves one), soups.csv and soups.md. The sweep is only read."""
    from dmg_domainbed.reporting.soups import write_soups

    table, files, warnings = write_soups(args.input_dir, args.output_dir, args.modes, args.data_dir)
    print(table)
    for line in warnings:  # a diverged run's weights are in its soups
        print(line)
    sweep, soups = (shlex.quote(str(args.input_dir)), shlex.quote(str(args.output_dir)))
    print(f"\nReport them with the runs: dmg-domainbed report --input_dir {sweep} --soups {soups}")
    _print_files(files)
    return 0


def evaluate_command(args: argparse.Namespace) -> int:
    """Rebuilds the held-out split of every source domain exactly as train.py made it and
    classifies it with predict (DMG: averaged masks; MultiHead: averaged heads) and, where the
    algorithm has one, known-domain prediction (DMG soft and hard masks, MultiHead's own head).
    Several runs of one sweep with the same test domains make one table. Writes in_domain.csv
    and in_domain.md."""
    from dmg_domainbed.reporting.in_domain import check_comparable, write_in_domain

    runs = [read_run(path) for path in args.run_dir]
    check_comparable(runs)  # what is wrong with the runs given is said before their folders
    output = _beside(runs, "dmg_evaluate", args.output_dir)
    _print_written(write_in_domain([runs], output, args.data_dir))
    return 0


def select_command(args: argparse.Namespace) -> int:
    """Evaluates every model a sweep's runs saved at their checkpoints (train.py's
    --save_model_every_checkpoint) on the source domains' validation splits, rebuilt exactly as
    train.py made them, with every prediction the algorithm has (DMG: predict, known-domain
    soft and hard masks; MultiHead: predict, own head), and reports the test-domain accuracy
    that each prediction's validation accuracy selects with DomainBed's training-domain
    validation method (best checkpoint, then best hparams; mean over trials). Selecting by
    predict gives collect_results' numbers; DMG selected by its hard masks is the paper's
    protocol. Writes checkpoints.csv, selection.csv and selection.md."""
    from dmg_domainbed.reporting.in_domain import write_selection
    from dmg_domainbed.reporting.outputs import check_output_dir

    sweep = require_sweep(args.input_dir)
    output = check_output_dir(args.output_dir, sweep)
    _print_written(write_selection(sweep, output, args.data_dir))
    return 0


def masks_command(args: argparse.Namespace) -> int:
    """Loads a finished run and asks its algorithm to draw what it learned into OUTPUT_DIR: for
    DMG, masks.png (per layer: the mask probability sigmoid(logit) of every unit for every
    source domain, and the hard IoU matrix between domains), masks_probabilities.csv and
    masks_iou.csv (soft and hard IoU); for ImportanceMask, masks.png (per tracked parameter,
    the importance of every weight and the important-weight mask) and masks_importance.csv."""
    from dmg_domainbed.reporting.learned import draw_learned, require_drawing
    from dmg_domainbed.runs import warnings

    run = read_run(args.run_dir)
    require_drawing(run, "masks")
    output = _beside([run], "dmg_masks", args.output_dir)
    drawn = draw_learned(run, output, "masks")
    print(f"What {run.describe()} learned:")
    print(drawn.summary.round(3).to_string())
    for line in warnings([run]):
        print(line)
    _print_files(drawn.files)
    return 0
