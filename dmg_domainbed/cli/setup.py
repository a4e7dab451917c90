"""Setting up: ``install-domainbed`` (DomainBed at the tested commit, importable here)."""

from __future__ import annotations

import argparse
from pathlib import Path

from dmg_domainbed import TESTED_DOMAINBED_COMMIT
from dmg_domainbed.cli import command


def add_parsers(subparsers) -> None:
    from dmg_domainbed import domainbed_setup

    install = command(
        subparsers,
        "install-domainbed",
        install_domainbed_command,
        "fetch DomainBed at the tested commit and make it importable in this Python",
        (
            f"Clone DomainBed with git, check out the tested commit {TESTED_DOMAINBED_COMMIT[:12]} "
            f"into --dir and write {domainbed_setup.PTH_NAME} into this Python's site-packages "
            "so that `import domainbed` finds it. What it needs (a git repository to clone, "
            "a --dir and a site-packages it can write) is checked before anything changes. Run "
            "again, it changes nothing. A run killed mid-clone makes no --dir; the hidden "
            "*.partial-* folder it leaves beside it can be deleted. A folder at another commit "
            "is left alone unless --force. Where GitHub cannot be reached, "
            "clone DomainBed elsewhere and give that folder as --from."
        ),
    )
    install.add_argument(
        "--from",
        dest="source",
        default=domainbed_setup.DOMAINBED_URL,
        metavar="PATH_OR_URL",
        help="git URL, local checkout or bare repository of DomainBed (default: %(default)s)",
    )
    install.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="folder of the checkout (default: <sys.prefix>/src/DomainBed, beside this "
        "environment's files)",
    )
    install.add_argument(
        "--force",
        action="store_true",
        help="check out the tested commit in an existing checkout at another commit, or point "
        "the .pth file at --dir when it names another folder",
    )


def install_domainbed_command(args: argparse.Namespace) -> int:
    from dmg_domainbed import domainbed_setup

    domainbed_setup.install_domainbed(args.source, args.dir, force=args.force)
    return 0
