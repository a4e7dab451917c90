"""Pictures of what a finished run learned, drawn by the run's own algorithm.

The algorithm draws from its trained state (rebuilt from ``model.pkl``) and from plain data
about the run built here (:class:`~dmg_domainbed.drawing.FinishedRun`): the run's title, the
names of its source domains and, for an algorithm that asks for them (``SAMPLE_IMAGES``), the
first held-out images of every environment, rebuilt as train.py split them and without training
augmentation. Algorithms never read run folders themselves.
"""

from __future__ import annotations

from pathlib import Path

from dmg_domainbed.algorithms.base import declarations_of
from dmg_domainbed.drawing import Drawn, FinishedRun, Sample
from dmg_domainbed.errors import UserError
from dmg_domainbed.reporting.runs import (
    RESULTS_FILE,
    Run,
    algorithm_class,
    load_algorithm,
    load_dataset,
    read_records,
    rebuild_splits,
    run_folders,
)


def require_drawing(run: Run, command: str) -> None:
    """:class:`UserError` unless ``run``'s algorithm draws what it learned; the error names the
    algorithms that do and up to four runs of theirs next to ``run``."""
    from domainbed import algorithms

    if declarations_of(algorithm_class(run)).LEARNED_PICTURES:
        return
    drawing = [
        name
        for name in algorithms.ALGORITHMS
        if declarations_of(algorithms.get_algorithm_class(name)).LEARNED_PICTURES
    ]
    siblings = []
    for folder in run_folders(run.path.parent):
        records = read_records(folder / RESULTS_FILE)
        if records and records[-1].get("args", {}).get("algorithm") in drawing:
            siblings.append(str(folder))
            if len(siblings) == 4:
                break
    hint = f" Runs of those next to it: {', '.join(siblings)}." if siblings else ""
    raise UserError(
        f"'{run.path}' is a run of {run.algorithm}, which draws nothing of what it learned; "
        f"'{command}' needs a run of {' or '.join(drawing)}.{hint}"
    )


def finished_run(run: Run, images_per_environment: int = 0) -> FinishedRun:
    """The plain data an algorithm draws ``run`` from; with ``images_per_environment`` > 0, that
    many held-out images of every environment (source and test), in split order."""
    samples = []
    if images_per_environment:
        import torch

        dataset = load_dataset(run, augment=False)
        names = run.environments()
        for env, split in enumerate(rebuild_splits(dataset, run.args)):
            keys = split.out_keys[:images_per_environment]
            samples.append(
                Sample(
                    environment=names[env],
                    role="test" if env in run.test_envs else "source",
                    images=torch.stack([dataset[env][k][0] for k in keys]),
                )
            )
    return FinishedRun(str(run.path), run.title(), tuple(run.domain_names()), tuple(samples))


def draw_learned(run: Run, output_dir: Path, stem: str) -> Drawn:
    """Load the run's algorithm (on CPU) and let it draw what it learned into ``output_dir``,
    files named ``<stem>*``."""
    algorithm = load_algorithm(run, "cpu")
    drawn_from = finished_run(run, declarations_of(type(algorithm)).SAMPLE_IMAGES)
    return algorithm.draw_learned(drawn_from, output_dir, stem)
