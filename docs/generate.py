"""Write the sections of README.md and docs/*.md that the code can tell, or check them.

    python docs/generate.py           # rewrite every generated section from the code
    python docs/generate.py --check   # exit 1, naming each section that is stale

A generated section lies between two comments that name what it holds::

    <!-- generated: hparams DMG -->
    ...
    <!-- end of generated: hparams DMG -->

Kinds: ``hparams ALGORITHM`` (its declared hparams: defaults, per-dataset defaults, the range
DomainBed's random search draws, what is allowed), ``every-algorithm-hparams`` (the same for
the hparams the package gives every algorithm), ``cli COMMAND`` (the subcommand's ``--help``;
a nested one by its words, e.g. ``cli data check``),
``launcher NAME`` (a launcher's settings), ``sweep-keys`` (what a sweep file's ``[sweep]`` holds),
``gpu TABLE [FILE]`` (a table of the GPU run recorded in ``docs/gpu_proof.json``, or in FILE, a
results file of ``benchmarks/gpu_proof.py``; "unmeasured" where there is none), ``demo SECTION``
(the README's demo: ``run``, its stamp, hparams, collect_results' table and paired comparisons, and
``in-domain TEST_ENV``, from ``docs/demo_results.json``, which ``docs/demo_figures.py``
records). It also writes ``dmg_domainbed/sweep/cost_table.json``, the measured times a sweep's
dry run estimates its GPU-hours with, from ``docs/gpu_proof.json``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SECTION = re.compile(
    r"(<!-- generated: (?P<name>[^>]+?) -->\n)(?P<body>.*?)(<!-- end of generated: (?P=name) -->)",
    re.DOTALL,
)
SEARCH_DRAWS = 1000  # hparams seeds drawn to show the random search's range


def _code(value) -> str:
    return f"`{value!r}`" if not isinstance(value, str) else f"`'{value}'`"


def hparams_table(algorithm: str) -> str:
    """Every hparam ``algorithm`` declares: default, per-dataset defaults, what DomainBed's
    random search draws (seen over SEARCH_DRAWS seeds, seeded as DomainBed seeds it), allowed
    values and meaning."""
    from domainbed import algorithms

    return space_table(algorithms.get_algorithm_class(algorithm).HPARAMS)


def every_algorithm_table() -> str:
    """The hparams this package gives every algorithm (``precision``, ``averaging``...), as
    :func:`hparams_table` shows an algorithm's own."""
    from dmg_domainbed.hparams.every_algorithm import EVERY_ALGORITHM

    return space_table(EVERY_ALGORITHM)


def space_table(space) -> str:
    """The table of :func:`hparams_table` for the hparams of ``space``."""
    import numpy as np
    from domainbed.lib import misc

    def seeded(seed: int) -> np.random.RandomState:
        state.seed(seed)  # as np.random.RandomState(seed), without building one each draw
        return state

    rows, state = [], np.random.RandomState()
    for hparam in space:
        draws = [
            hparam.sample(seeded(misc.seed_hash(seed, hparam.name)))
            for seed in range(1, SEARCH_DRAWS + 1)
        ]
        seen = list({repr(value): value for value in map(_plain, draws)}.values())
        numbers = all(isinstance(d, float | int) and not isinstance(d, bool) for d in seen)
        if numbers and len(seen) > 4:
            search = f"{min(seen):.3g} to {max(seen):.3g}"
        else:
            search = ", ".join(_code(value) for value in seen)
        per_dataset = ", ".join(f"{name}: {_code(v)}" for name, v in hparam.per_dataset.items())
        scope = f" (on {', '.join(hparam.datasets)} only)" if hparam.datasets else ""
        rows.append(
            [
                f"`{hparam.name}`",
                _code(hparam.default),
                per_dataset or "",
                search,
                hparam.rule.allowed(),
                hparam.help + scope,
            ]
        )
    headers = ["hparam", "default", "per-dataset default", "random search", "allowed", "meaning"]
    return tabulate(rows, headers, tablefmt="github", disable_numparse=True)


def _plain(value):
    return value.item() if hasattr(value, "item") else value


def cli_help(*command: str) -> str:
    """``dmg-domainbed COMMAND... --help``, as the parser prints it."""
    text = subcommands()[" ".join(command)].format_help()
    return f"```text\n{text.rstrip()}\n```"


def subcommands() -> dict[str, argparse.ArgumentParser]:
    """The parser of every ``dmg-domainbed`` subcommand, nested ones under their words joined
    by spaces (``data check``), formatting help 100 columns wide."""
    import os

    from dmg_domainbed.cli import build_parser

    os.environ["COLUMNS"] = "100"
    parsers: dict[str, argparse.ArgumentParser] = {}

    def collect(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    parsers[f"{prefix}{name}"] = child
                    collect(child, f"{prefix}{name} ")

    collect(build_parser(), "")
    return parsers


COMMAND_LINE = re.compile(r"dmg-domainbed[ \t]+[^`\n]*")


def unknown_options(pages=PAGES) -> list[str]:
    """``PAGE: COMMAND LINE: what`` for each ``dmg-domainbed`` command line in the pages that
    names a subcommand or a ``--flag`` the parser does not have."""
    import shlex

    parsers = subcommands()
    problems = []
    for page in pages:
        for line in COMMAND_LINE.findall(page.read_text().replace("\\\n", " ")):
            try:
                words = shlex.split(line.split(" #")[0])
            except ValueError:  # unbalanced quotes in prose
                words = line.split()
            if len(words) < 2 or words[1].startswith("-") or not words[1].isidentifier():
                continue
            command, rest = words[1], words[2:]
            while rest and f"{command} {rest[0]}" in parsers:
                command, rest = f"{command} {rest[0]}", rest[1:]
            flags = [w.split("=")[0] for w in rest if w.startswith("--")]
            if command not in parsers:
                problems.append(f"{page.relative_to(ROOT)}: {line}: no subcommand {command!r}")
                continue
            known = {o for a in parsers[command]._actions for o in a.option_strings}
            problems += [
                f"{page.relative_to(ROOT)}: {line}: {command} has no {flag}"
                for flag in flags
                if flag not in known
            ]
    return problems


def launcher_table(name: str) -> str:
    """A launcher's settings: sweep-file key, environment variable, default, allowed, meaning."""
    from domainbed import command_launchers

    from dmg_domainbed.launchers.common import as_launcher

    rows = [
        [
            f"`{option.name}`",
            f"`{option.env}`",
            "decided by the launcher" if option.default is None else _code(option.default),
            option.rule.allowed(),
            option.help,
        ]
        for option in as_launcher(command_launchers.REGISTRY[name]).options
    ]
    headers = ["[launcher] key", "variable", "default", "allowed", "meaning"]
    return tabulate(rows, headers, tablefmt="github", disable_numparse=True)


def sweep_keys_table() -> str:
    """The keys of a sweep file's ``[sweep]`` table, with DomainBed's sweep defaults."""
    import dataclasses

    from dmg_domainbed.sweep.config import REQUIRED, SWEEP_KEYS, SweepConfig

    defaults = {f.name: f.default for f in dataclasses.fields(SweepConfig)}
    rows = []
    for key, rule in SWEEP_KEYS.items():
        default = defaults.get(key, dataclasses.MISSING)
        if key in REQUIRED:
            shown = "required"
        elif key in ("hparams", "algorithm_hparams"):
            shown = "none"
        elif default is None:
            shown = "the dataset's own" if key in ("steps", "checkpoint_freq") else "none"
        else:
            shown = _code(default)
        rows.append([f"`{key}`", shown, rule.allowed()])
    return tabulate(rows, ["key", "default", "allowed"], tablefmt="github", disable_numparse=True)


GPU_RESULTS = ROOT / "docs" / "gpu_proof.json"


def script(path: Path):
    """A script of the repository (``benchmarks/``, ``docs/``: scripts, not a package) as a
    module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def gpu_proof():
    """``benchmarks/gpu_proof.py`` as a module."""
    return script(ROOT / "benchmarks" / "gpu_proof.py")


def gpu_table(table: str, results_file: str | Path | None = None) -> str:
    """One table of the GPU run recorded in ``results_file`` (a path from the repository root;
    default :data:`GPU_RESULTS`); every table says "unmeasured" where no run is recorded. A tiny
    run's results are refused: its figures are not measurements."""
    import json

    path = GPU_RESULTS if results_file is None else ROOT / results_file
    results = json.loads(path.read_text()) if path.exists() else None
    if results is not None and results["mode"] != "full":
        raise SystemExit(
            f"{path} holds a {results['mode']} run of benchmarks/gpu_proof.py, whose figures are "
            "not measurements: copy there the gpu_proof.json of a full run on a GPU"
        )
    return gpu_proof().markdown(results, table)


COST_TABLE = ROOT / "dmg_domainbed" / "sweep" / "cost_table.json"


def cost_table() -> str:
    """The package's cost table (what ``sweep --dry-run`` reads), from :data:`GPU_RESULTS`."""
    import json

    from dmg_domainbed.sweep.cost import table_from_gpu_proof

    results = json.loads(GPU_RESULTS.read_text()) if GPU_RESULTS.exists() else None
    table = None if results is None else table_from_gpu_proof(results, "docs/gpu_proof.json")
    return json.dumps(None if table is None else table.as_json(), indent=1) + "\n"


def demo_section(section: str, *arguments: str) -> str:
    """A section of the README's demo, rendered by ``docs/demo_figures.py``."""
    return script(ROOT / "docs" / "demo_figures.py").markdown(section, *arguments)


KINDS: dict[str, Callable[..., str]] = {
    "hparams": hparams_table,
    "every-algorithm-hparams": every_algorithm_table,
    "cli": cli_help,
    "launcher": launcher_table,
    "sweep-keys": sweep_keys_table,
    "gpu": gpu_table,
    "demo": demo_section,
}


def render(name: str) -> str:
    kind, *arguments = name.split()
    if kind not in KINDS:
        raise SystemExit(f"unknown generated section {name!r}; kinds: {', '.join(KINDS)}")
    return KINDS[kind](*arguments)


def regenerate(text: str) -> str:
    """``text`` with every generated section written anew."""

    def replace(match: re.Match) -> str:
        return f"{match.group(1)}{render(match.group('name'))}\n{match.group(4)}"

    return SECTION.sub(replace, text)


def stale_sections(pages=PAGES) -> list[str]:
    """``PAGE: NAME`` of every generated section that differs from what the code gives."""
    stale = []
    for page in pages:
        text = page.read_text()
        for match in SECTION.finditer(text):
            if match.group("body") != render(match.group("name")) + "\n":
                stale.append(f"{page.relative_to(ROOT)}: {match.group('name')}")
    return stale


def main(argv: list[str]) -> int:
    import dmg_domainbed

    dmg_domainbed.register()
    if "--check" in argv:
        problems = [f"stale: {name} (run python docs/generate.py)" for name in stale_sections()]
        if not COST_TABLE.exists() or COST_TABLE.read_text() != cost_table():
            problems.append(f"stale: {COST_TABLE.relative_to(ROOT)} (run python docs/generate.py)")
        problems += unknown_options()
        print("\n".join(problems))
        return 1 if problems else 0
    for page in PAGES:
        text = page.read_text()
        new = regenerate(text)
        if new != text:
            page.write_text(new)
            print(f"wrote {page.relative_to(ROOT)}")
    if not COST_TABLE.exists() or COST_TABLE.read_text() != cost_table():
        COST_TABLE.write_text(cost_table())
        print(f"wrote {COST_TABLE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
