"""Run the README's demo and record what the README and docs/ show of it.

    python docs/demo_figures.py    # the whole demo (50 s on 2 quiet cores), then the files below

It runs ``dmg-domainbed demo`` with its defaults, as the README's command does (in a new
temporary folder, or ``--output_dir DIR``, which must not exist yet: the run is never a resumed
one), then writes, overwriting only these files:

* ``docs/demo_results.json``: the stamp (commit and whether the tree was clean, date, Python,
  torch, numpy, DomainBed, the machine, the load average during the run, its wall time);
  collect_results' table (mean and standard error per cell, averages); the paired comparisons
  with ERM (as the report computes them); the in-domain accuracies of ``evaluate`` of the first
  trial's runs; and every job's ``train.py`` arguments and final accuracies;
* the report's pictures the README and docs/ show: ``docs/demo_accuracy.png``,
  ``docs/demo_dmg_diagnostics.png`` and ``docs/demo_masks.png``;

and then rewrites the docs' ``demo`` sections (``python docs/generate.py``), which render the
results file through :func:`markdown`. ``tests/test_demo_figures.py`` reruns one job of each
algorithm as the demo runs it and compares its final accuracies with this file's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "demo_results.json"
COMMAND = "python docs/demo_figures.py"
DEMO_COMMAND = "dmg-domainbed demo"
SELECTION = "training-domain validation set"  # the model selection the README shows
REFERENCE_ALGORITHM = "ERM"
LOAD_EVERY_S = 5.0
WIDTH = 112  # the README's lines


def pictures(dataset: str) -> dict[str, str]:
    """The report's pictures (in the demo's report folder) -> their names in docs/."""
    return {
        f"accuracy_{dataset}.png": "demo_accuracy.png",
        f"dmg_diagnostics_{dataset}.png": "demo_dmg_diagnostics.png",
        "masks_DMG_test_env0.png": "demo_masks.png",
    }


def demo_plan(output_dir: Path) -> tuple[argparse.Namespace, Any, list]:
    """``dmg-domainbed demo --output_dir OUTPUT_DIR``, every other setting the demo's default:
    its arguments as the command line parses them, its sweep and DomainBed's jobs of it."""
    from dmg_domainbed.cli import build_parser
    from dmg_domainbed.cli.sweeps import demo_config_of
    from dmg_domainbed.demo import demo_sweeps
    from dmg_domainbed.sweep.plan import plan_sweep

    args = build_parser().parse_args(["demo", "--output_dir", str(output_dir)])
    config = demo_config_of(args)
    sweeps = demo_sweeps(config, output_dir)
    return args, config, [job for sweep in sweeps for job in plan_sweep(sweep).jobs]


class LoadAverage:
    """The 1-minute load average, sampled every :data:`LOAD_EVERY_S` seconds while the block
    runs (and once at its start and end)."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        self.samples.append(os.getloadavg()[0])
        while not self._stop.wait(LOAD_EVERY_S):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self) -> LoadAverage:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(os.getloadavg()[0])


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()


def cpu_model() -> str:
    """The processor's name, as the kernel reports it (Linux), else as Python does."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def stamp(config, load: LoadAverage, started: datetime, wall_s: float, tree: list[str]) -> dict:
    """What made the figures: the code, the software, the machine and how busy it was."""
    import domainbed
    import numpy
    import torch

    import dmg_domainbed
    from dmg_domainbed.cores import usable_cores
    from dmg_domainbed.domainbed_setup import checkout_commit

    domainbed_commit = checkout_commit(Path(domainbed.__file__).resolve().parents[1])
    return {
        "commit": git("rev-parse", "--short=7", "HEAD"),
        "clean": not tree,
        "uncommitted": tree,
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "package": dmg_domainbed.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "numpy": numpy.__version__,
        "domainbed": (domainbed_commit or "not a git checkout")[:7],
        "machine": {
            "architecture": platform.machine(),
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "usable_cores": usable_cores(),
            "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        },
        "jobs_at_once": config.launcher_options["jobs"],
        "load_average": {
            "min": round(min(load.samples), 2),
            "max": round(max(load.samples), 2),
            "every_s": LOAD_EVERY_S,
        },
        "wall_time_s": round(wall_s, 1),
    }


def plain(value):
    """A CSV cell as JSON holds it: a missing value as null, numpy numbers as Python's."""
    import pandas as pd

    return None if pd.isna(value) else value.item() if hasattr(value, "item") else value


def rows(frame, columns: list[str]) -> list[dict]:
    return [{c: plain(v) for c, v in zip(columns, row)} for row in frame[columns].to_numpy()]


def final_accuracies(output_dir: str) -> dict:
    """The accuracies ``train.py`` logged at a run's last step."""
    from dmg_domainbed import runs

    last = runs.read_records(Path(output_dir) / runs.RESULTS_FILE)[-1]
    return {"step": last["step"], **{k: v for k, v in last.items() if k.endswith("_acc")}}


def job_arguments(job) -> dict:
    """A job's ``train.py`` arguments, but its output folder (the run's own)."""
    return {k: v for k, v in job.train_args.items() if k != "output_dir"}


def job_record(job) -> dict:
    """A job's ``train.py`` arguments and final accuracies."""
    return {"args": job_arguments(job), "final": final_accuracies(job.output_dir)}


def read_report(report_dir: Path, jobs: list) -> dict:
    """collect_results' table, the comparisons and the in-domain accuracies, from the report."""
    import pandas as pd

    # Domain names as the tables write them, whatever they look like.
    names = {"test_env": str, "test_domain": str, "domain": str, "n_trials": "Int64"}
    results = pd.read_csv(report_dir / "results.csv", dtype=names)
    results = results[results["accuracy"].notna()]
    comparisons = pd.read_csv(report_dir / "comparisons.csv", dtype=names)
    in_domain = pd.read_csv(report_dir / "in_domain.csv", dtype=names)
    held_out = {str(Path(j.output_dir)): j.train_args["test_envs"][0] for j in jobs}
    in_domain["test_env"] = [held_out[str(Path(run))] for run in in_domain["run"]]
    return {
        "results": rows(
            results,
            ["selection_method", "algorithm", "test_domain", "accuracy", "stderr", "n_trials"],
        ),
        "comparisons": rows(
            comparisons,
            "selection_method algorithm reference test_domain n_trials difference ci_low ci_high "
            "p_beats verdict".split(),
        ),
        "in_domain": rows(in_domain, ["test_env", "prediction", "domain", "accuracy"]),
    }


def run_and_record(output_dir: Path) -> tuple[dict, Path]:
    """Run the demo into ``output_dir``; return the results file's content and the report's
    folder."""
    from dmg_domainbed.demo import DATASET, REPORT

    tree = git("status", "--porcelain").splitlines()
    args, config, jobs = demo_plan(output_dir)
    started, start = datetime.now(timezone.utc), time.monotonic()
    with LoadAverage() as load:
        code = args.func(args)
    wall_s = time.monotonic() - start
    if code != 0:
        raise SystemExit(f"{DEMO_COMMAND} failed (exit status {code}): nothing recorded")
    results = {
        "command": DEMO_COMMAND,
        "recorded_by": COMMAND,
        "demo": {
            "dataset": DATASET,
            "algorithms": list(config.algorithms),
            "steps": config.steps,
            "trials": config.n_trials,
            "hparams_samples": config.n_hparams,
        },
        "stamp": stamp(config, load, started, wall_s, tree),
        **read_report(output_dir / REPORT, jobs),
        "jobs": [job_record(job) for job in jobs],
    }
    return results, output_dir / REPORT


def replace_file(target: Path, write) -> None:
    """Write ``target`` through a temporary file beside it, so it is whole or as it was."""
    partial = target.with_name(f".{target.name}.partial")
    write(partial)
    os.replace(partial, target)


def save(results: dict, report_dir: Path) -> list[Path]:
    """The results file and the pictures, each replaced whole; the pictures are checked to
    exist before anything is written."""
    copies = {
        report_dir / drawn: RESULTS.parent / shown
        for drawn, shown in pictures(results["demo"]["dataset"]).items()
    }
    missing = [str(drawn) for drawn in copies if not drawn.is_file()]
    if missing:
        raise SystemExit(f"the demo's report lacks {', '.join(missing)}: nothing recorded")
    for drawn, shown in copies.items():
        replace_file(shown, lambda path, drawn=drawn: shutil.copyfile(drawn, path))
    text = json.dumps(results, indent=1) + "\n"
    replace_file(RESULTS, lambda path: path.write_text(text))
    return [*copies.values(), RESULTS]


def regenerate_docs() -> None:
    """``python docs/generate.py``: the docs' generated sections, the demo's among them."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("generate", ROOT / "docs" / "generate.py")
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    generate.main([])


# The docs' `demo` sections, rendered from the results file.


def load(path: Path = RESULTS) -> dict:
    if not path.exists():
        raise SystemExit(f"{path.relative_to(ROOT)} is missing: run {COMMAND}")
    return json.loads(path.read_text())


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    # No-break spaces keep a duration on one line (textwrap breaks at ASCII whitespace only).
    return f"{minutes}\u00a0min {rest}\u00a0s" if minutes else f"{rest}\u00a0s"


def _fill(text: str) -> str:
    return textwrap.fill(text, WIDTH, break_on_hyphens=False).replace("\u00a0", " ")


def stamp_text(results: dict) -> str:
    """What ran, where and when, and what the table below shows."""
    run = results["stamp"]
    machine, load_ = run["machine"], run["load_average"]
    tree = "clean" if run["clean"] else "with uncommitted changes"
    gpus = "no GPU" if not machine["gpus"] else f"{machine['gpus']} GPU(s), unused"
    return (
        f"Our run of that command (`{results['recorded_by']}`, {run['date'][:10]}, "
        f"commit {run['commit']}, {tree}; torch {run['torch']}, numpy {run['numpy']}, Python "
        f"{run['python']}, DomainBed {run['domainbed']}; {machine['cores']}-core "
        f"{machine['architecture']} {machine['cpu']}, {gpus}, load average {load_['min']:.1f} to "
        f"{load_['max']:.1f}) took {_duration(run['wall_time_s'])}."
    )


def hparams_text() -> str:
    """The hparams the demo's jobs train with (hparams seed 0: the defaults), from the code's
    declarations: the dataset's own, those an algorithm declares for that dataset, and the
    demo's own (``DEMO_HPARAMS``)."""
    from domainbed import algorithms, datasets, hparams_registry

    from dmg_domainbed.demo import ALGORITHMS, DATASET, DEMO_HPARAMS

    def shown(value) -> str:
        return f"`'{value}'`" if isinstance(value, str) else repr(value)

    defaults = hparams_registry.default_hparams(REFERENCE_ALGORITHM, DATASET)
    own = [
        f"`{h.name}` {shown(defaults[h.name])}" for h in datasets.get_dataset_class(DATASET).HPARAMS
    ]
    special = []
    for name in ALGORITHMS:
        values = hparams_registry.default_hparams(name, DATASET)
        for hparam in getattr(algorithms.get_algorithm_class(name), "HPARAMS", ()):
            if DATASET in hparam.per_dataset:
                special.append(
                    f"{name}'s `{hparam.name}` {shown(values[hparam.name])} on {DATASET}, "
                    f"{shown(hparam.default)} elsewhere"
                )
        for hparam, value in DEMO_HPARAMS.get(name, {}).items():
            special.append(
                f"{name}'s `{hparam}` {shown(value)}, the demo's own "
                f"({shown(values[hparam])} by default)"
            )
    return f"Hparams: seed 0, declared defaults ({'; '.join([', '.join(own), *special])})."


def table_text(results: dict) -> str:
    """collect_results' table under the README's model selection, as collect_results writes
    its cells."""
    from dmg_domainbed.reporting.tables import AVERAGE, cell_text

    cells = [r for r in results["results"] if r["selection_method"] == SELECTION]
    domains = list(dict.fromkeys(r["test_domain"] for r in cells))
    lines = [f"| Algorithm | {' | '.join(domains)} |", "|---" * (len(domains) + 1) + "|"]
    for algorithm in dict.fromkeys(r["algorithm"] for r in cells):
        own = {r["test_domain"]: r for r in cells if r["algorithm"] == algorithm}
        texts = [
            f"{own[d]['accuracy']:.1f}"
            if d == AVERAGE
            else cell_text(own[d]["accuracy"], own[d]["stderr"], own[d]["n_trials"])
            for d in domains
        ]
        lines.append(f"| {algorithm} | {' | '.join(texts)} |")
    return "\n".join(lines)


def _difference(row: dict, first: bool) -> str:
    """``DMG -2.5 ([-5.9, +0.8]: no clear difference)``; the first says what the numbers are."""
    interval = f"[{row['ci_low']:+.1f}, {row['ci_high']:+.1f}]"
    verdict = {"unclear": "no clear difference"}.get(row["verdict"], row["verdict"])
    difference = f"{row['difference']:+.1f}" + (" points" if first else "")
    interval = f"95% interval {interval}" if first else interval
    return f"{row['algorithm']} {difference} ({interval}: {verdict})"


def in_domain_means(results: dict) -> dict[str, float]:
    """Per prediction, the mean over the first trial's runs (one per held-out domain) of its
    accuracy averaged over the source domains' validation splits."""
    per_run: dict[str, dict[int, list[float]]] = {}
    for row in results["in_domain"]:
        own = per_run.setdefault(row["prediction"], {})
        own.setdefault(row["test_env"], []).append(row["accuracy"])
    return {
        prediction: sum(sum(v) / len(v) for v in runs.values()) / len(runs)
        for prediction, runs in per_run.items()
    }


def comparisons_text(results: dict) -> str:
    """The paired differences to ERM over the dataset, and the in-domain accuracies of ERM and
    of MultiHead's two predictions, which explain MultiHead's."""
    from dmg_domainbed.reporting.tables import AVERAGE

    average = [
        r
        for r in results["comparisons"]
        if r["selection_method"] == SELECTION and r["test_domain"] == AVERAGE
    ]
    named = [_difference(r, i == 0) for i, r in enumerate(average)]
    means = in_domain_means(results)
    return (
        f"Paired with {average[0]['reference']} over the test domains: {', '.join(named)}. "
        "In-domain (`evaluate`, first trial, source validation splits): ERM "
        f"{means['ERM (predict)']:.1f}%, MultiHead's averaged heads "
        f"{means['MultiHead (predict)']:.1f}%, own head "
        f"{means['MultiHead-KnownDomain, own head']:.1f}%."
    )


#: What the table's cells are worth on another machine: one machine gives every job bit for bit
#: again; another CPU's kernels move the cells (the same command on an AMD EPYC and on an Intel
#: Xeon: by up to 0.4 points).
OTHER_CPUS = (
    "Run again on one machine, every job gives the same numbers bit for bit; other CPUs give "
    "cells a few tenths of a point apart (an AMD EPYC and an Intel Xeon: up to 0.4 points)."
)


def run_text(results: dict) -> str:
    """The README's demo: the stamp and the hparams, collect_results' table, the paired
    differences and the in-domain accuracies."""
    header = (
        f"{stamp_text(results)} {hparams_text()} Test accuracy (%) as collect_results gives "
        "it (the averaged row: its own sweep's), mean +/- standard error over "
        f"{results['demo']['trials']} trials of {results['demo']['steps']} steps, "
        f"{SELECTION.removesuffix(' set')}:"
    )
    after = f"{OTHER_CPUS} {comparisons_text(results)}"
    return f"{_fill(header)}\n\n{table_text(results)}\n\n{_fill(after)}"


def in_domain_table(results: dict, test_env: str) -> str:
    """``evaluate``'s Table 3 of the first trial's runs with ``test_env`` held out."""
    import pandas as pd

    from dmg_domainbed.reporting.in_domain import table3
    from dmg_domainbed.reporting.tables import markdown_table

    own = pd.DataFrame([r for r in results["in_domain"] if r["test_env"] == int(test_env)])
    return markdown_table(table3(own), "Prediction").rstrip("\n")


SECTIONS = {"run": run_text, "in-domain": in_domain_table}


def markdown(section: str, *arguments: str) -> str:
    """A ``demo SECTION ARGUMENTS`` section of the docs, from the results file (and, for the
    hparams the demo's jobs train with, the code)."""
    if section not in SECTIONS:
        raise SystemExit(f"unknown demo section {section!r}; sections: {', '.join(SECTIONS)}")
    return SECTIONS[section](load(), *arguments)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--output_dir",
        type=Path,
        help="keep the demo's folder (sweep and report) here; it must not exist yet "
        "(default: a temporary folder, removed afterwards)",
    )
    options = parser.parse_args(argv)
    if options.output_dir is not None and options.output_dir.exists():
        parser.error(f"--output_dir {options.output_dir} exists; give a new folder")
    with tempfile.TemporaryDirectory(prefix="demo_figures_") as temporary:
        output_dir = options.output_dir or Path(temporary) / "demo"
        results, report_dir = run_and_record(output_dir.resolve())
        written = save(results, report_dir)
    print("wrote " + ", ".join(str(path.relative_to(ROOT)) for path in written))
    regenerate_docs()
    return 0


if __name__ == "__main__":
    sys.exit(main())
