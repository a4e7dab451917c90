"""``dmg-domainbed`` command line: one module per subcommand, each thin over library code,
whose ``add_parser(subparsers)`` registers its parser and sets ``func`` to a ``run(args) ->
int``. A :class:`~dmg_domainbed.errors.UserError` is printed as one message, exit status 2;
every other exception keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

from dmg_domainbed.errors import UserError

SUBCOMMANDS = ("demo", "report", "evaluate", "select", "masks", "sweep", "doctor", "smoke", "data")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dmg-domainbed",
        description=(
            "Domain-generalization algorithms for DomainBed (DMG, MultiHead, Aggregate, "
            "CorGrad, ImportanceMask, SFMOE): demo, sweeps, reports, checks."
        ),
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"dmg_domainbed.cli.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as error:
        print(f"dmg-domainbed {args.command}: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader (e.g. `| head`) stopped early: not an error of ours.
        sys.stdout = None
        return 0


def add_output_dir(parser: argparse.ArgumentParser, default: str, what: str) -> None:
    help = f"{what} (default: %(default)s)"
    parser.add_argument("--output_dir", type=Path, default=default, help=help)


def print_written(written) -> None:
    """The tables an evaluation of runs wrote, its notes and its files."""
    for title, table in written.sections:
        print(title + "\n")
        print(table.to_string())
    for note in written.notes():
        print(f"\n{note}")
    print(f"Wrote {', '.join(str(p) for p in written.files)}")


def whole_number(text: str) -> int:
    """An argparse ``type``: an integer >= 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)


def parse_hparams(text: str | None) -> dict:
    """A command line's ``--hparams`` JSON object (``{}`` when not given)."""
    if text is None:
        return {}
    try:
        hparams = json.loads(text)
    except json.JSONDecodeError as error:
        raise UserError(f"--hparams is not valid JSON ({error}): {text!r}") from None
    if not isinstance(hparams, dict):
        raise UserError(
            f"--hparams must be a JSON object like '{{\"resnet18\": true}}'; got {text!r}"
        )
    return hparams
