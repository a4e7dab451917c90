"""Pictures of what a finished run learned, drawn by its algorithm from its trained state and
plain data built here (:class:`~dmg_domainbed.drawing.FinishedRun`): it never reads run folders.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from dmg_domainbed import runs
from dmg_domainbed.algorithms.base import declarations_of
from dmg_domainbed.drawing import Drawn, FinishedRun, Sample
from dmg_domainbed.errors import UserError
from dmg_domainbed.reporting.outputs import staged
from dmg_domainbed.runs import Run


def require_drawing(run: Run, command: str) -> None:
    """:class:`UserError` unless ``run``'s algorithm draws what it learned, naming those that do."""
    from domainbed import algorithms

    if declarations_of(runs.algorithm_class(run)).LEARNED_PICTURES:
        return
    get = algorithms.get_algorithm_class
    drawing = [n for n in algorithms.ALGORITHMS if declarations_of(get(n)).LEARNED_PICTURES]
    siblings = []
    for folder in runs.run_folders(run.path.parent):
        try:
            records = runs.read_records(folder / runs.RESULTS_FILE)
        except UserError:  # a hint only: a damaged neighbour is passed over
            continue
        last = records[-1] if records and runs.wrong_field(records[-1]) is None else {}
        if last.get("args", {}).get("algorithm") in drawing:
            siblings.append(str(folder))
            if len(siblings) == 4:
                break
    hint = f" Runs of those next to it: {', '.join(siblings)}." if siblings else ""
    raise UserError(
        f"'{run.path}' is a run of {run.algorithm}, which draws nothing of what it learned; "
        f"'{command}' needs a run of {' or '.join(drawing)}.{hint}"
    )


def draw_learned(run: Run, output_dir: Path, stem: str) -> Drawn:
    """The run's algorithm (on CPU) draws what it learned into ``output_dir`` as ``<stem>*``."""
    import torch

    algorithm, samples = runs.load_algorithm(run, "cpu"), []
    if images := declarations_of(type(algorithm)).SAMPLE_IMAGES:
        dataset, names = runs.load_dataset(run, augment=False), run.environments()
        for env, split in enumerate(runs.rebuild_splits(dataset, run.args)):
            shown = torch.stack([dataset[env][k][0] for k in split.out_keys[:images]])
            samples.append(Sample(names[env], "test" if env in run.test_envs else "source", shown))
    drawn_from = FinishedRun(str(run.path), run.title(), tuple(run.domain_names()), tuple(samples))
    with staged(output_dir) as stage:
        drawn = algorithm.draw_learned(drawn_from, stage, stem)
    return replace(drawn, files=[output_dir / path.name for path in drawn.files])  # once moved
