"""``dmg-domainbed`` command line: subcommands thin over library code, grouped in modules by
when they are used. A module's ``add_parsers(subparsers)`` registers them (:func:`command`). A
:class:`~dmg_domainbed.errors.UserError` is printed as one message, exit status 2; every other
exception keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from dmg_domainbed import TESTED_DOMAINBED_COMMIT, __version__
from dmg_domainbed.errors import UserError

# The modules whose add_parsers(subparsers) register the subcommands, in the order of --help.
MODULES = ("setup", "sweeps", "checks", "results")


class PrintVersion(argparse.Action):
    """``--version`` and the tested DomainBed commit on one line (argparse's action wraps it)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, *_):
        print(f"dmg-domainbed {__version__} (tested with DomainBed {TESTED_DOMAINBED_COMMIT})")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dmg-domainbed",
        description=(
            "Domain-generalization algorithms for DomainBed (DMG, MultiHead, Aggregate, "
            "CorGrad, ImportanceMask, SFMOE): demo, sweeps, reports, checks."
        ),
    )
    parser.add_argument(
        "--version", action=PrintVersion, help="print the version and the tested DomainBed commit"
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in MODULES:
        importlib.import_module(f"dmg_domainbed.cli.{name}").add_parsers(subparsers)
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


def command(subparsers, name: str, func, help: str, description: str | None = None):
    """The parser of subcommand ``name``, which runs ``func(args) -> int``; its ``--help``
    describes it with ``description``, else ``func``'s docstring."""
    parser = subparsers.add_parser(name, help=help, description=description or func.__doc__)
    parser.set_defaults(func=func)
    return parser


def add_output_dir(parser: argparse.ArgumentParser, default: str | None, what: str) -> None:
    """``--output_dir``: ``what``, then its ``default`` unless None (``what`` says it)."""
    help = what if default is None else f"{what} (default: %(default)s)"
    parser.add_argument("--output_dir", type=Path, default=default, help=help)


def whole_number(text: str) -> int:
    """An argparse ``type``: an integer >= 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)
