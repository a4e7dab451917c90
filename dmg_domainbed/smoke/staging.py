"""Data and weights for the smoke jobs, inside one temporary folder.

A real image dataset is not read whole: DomainBed evaluates every split of every domain at a
run's first and last step, which on DomainNet alone is 586,000 images. Each job gets a sample
instead: every domain and class folder of the real dataset, with symbolic links to enough of
its real images for the job's batch. Missing data and weights are problems that stop the job,
named with the path looked at and the command that fixes them, as the doctor and the sweep
name them; with ``--synthetic`` they are replaced by synthetic stand-ins
(:mod:`dmg_domainbed.synthetic`): data in a folder of their own, and random weights only in a
cache inside the temporary folder, which the job alone reads. The user's caches are never
written to.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from dmg_domainbed import synthetic
from dmg_domainbed.datasets.layouts import IMAGE_FOLDERS
from dmg_domainbed.errors import UserError
from dmg_domainbed.preflight import data, requirements, weights
from dmg_domainbed.smoke.jobs import SmokeJob
from dmg_domainbed.weight_files import HF_SNAPSHOT, Caches, WeightFile

SYNTHETIC_DATA, RANDOM_WEIGHTS = "synthetic data", "random weights"


@dataclass
class Staged:
    """What one job runs on: its ``--data_dir``, extra environment variables, the stand-ins it
    uses and the problems that keep it from running."""

    job: SmokeJob
    data_dir: str | None
    stand_ins: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)


def _subfolders(folder: Path) -> list[str]:
    return sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())


def sample_image_folder(source: Path, target: Path, per_domain: int) -> None:
    """Link a sample of ``source`` (one folder per domain, one per class inside) into ``target``:
    every domain and class folder, and at least ``per_domain`` images per domain spread over
    the classes (fewer where the dataset has fewer)."""
    from torchvision.datasets.folder import IMG_EXTENSIONS  # ImageFolder's rule for an image

    for domain in _subfolders(source):
        classes = _subfolders(source / domain)
        per_class = max(1, math.ceil(per_domain / max(1, len(classes))))
        for name in classes:
            folder, linked = source / domain / name, target / domain / name
            images = sorted(
                e.name for e in os.scandir(folder) if e.name.lower().endswith(IMG_EXTENSIONS)
            )
            linked.mkdir(parents=True)
            for image in images[:per_class]:
                (linked / image).symlink_to(folder / image)


class Staging:
    """Prepares every job's data and weights under ``root``; stand-ins only with a
    ``synthetic_data_dir``, where synthetic datasets are written."""

    def __init__(self, root: Path, data_dir: str | None, synthetic_data_dir: Path | None = None):
        self.root, self.data_dir, self.synthetic_data_dir = root, data_dir, synthetic_data_dir
        self.random_caches = Caches.under(root / "random_weights")
        self.notes: list[str] = []

    def stage(self, jobs: list[SmokeJob]) -> list[Staged]:
        """Each dataset is staged once, for its job with the largest batch."""
        largest: dict[str, SmokeJob] = {}
        for job in jobs:
            if job.dataset not in largest or job.batch_size > largest[job.dataset].batch_size:
                largest[job.dataset] = job
        data = {dataset: self._data(job) for dataset, job in largest.items()}
        return [self._weights(job, *data[job.dataset]) for job in jobs]

    def _data(self, job: SmokeJob) -> tuple[str | None, list[str], list[str]]:
        """The ``--data_dir`` of ``job``'s dataset, its stand-ins and the problems."""
        found = requirements.data_status(job.dataset, self.data_dir)
        if found.state in (data.NOT_NEEDED, data.NOT_CHECKED) or (
            found.ok and job.dataset not in IMAGE_FOLDERS
        ):
            return self.data_dir, [], []
        holdout = job.train_args["holdout_fraction"]
        if found.ok:
            folder = IMAGE_FOLDERS[job.dataset]
            source = Path(self.data_dir).expanduser().resolve() / folder
            per_domain = synthetic.images_needed(job.batch_size, holdout)
            sample = self.root / "sample" / job.dataset
            sample_image_folder(source, sample / folder, per_domain)
            self.notes.append(
                f"{job.dataset}: a sample of {source} (every domain and class folder, at least "
                f"{per_domain} images per domain), linked into {sample}"
            )
            return str(sample), [], []
        if self.synthetic_data_dir is None or job.dataset not in synthetic.LAYOUTS:
            problem = f"{job.dataset} data {found.state}: {found.detail}"
            if job.dataset in synthetic.LAYOUTS:  # and so no --synthetic
                problem += "; or pass --synthetic to check the code path on random images"
            return self.data_dir, [], [problem]
        classes = len(synthetic.LAYOUTS[job.dataset].classes)
        per_domain = synthetic.images_needed(job.batch_size, holdout, classes)
        written = synthetic.write_image_dataset(
            job.dataset, self.synthetic_data_dir, images_per_domain=per_domain
        )
        self.notes.append(
            f"{job.dataset}: synthetic folder {written} ({per_domain} random images per "
            f"domain) stands in for the missing data ({found.detail})"
        )
        return str(self.synthetic_data_dir), [SYNTHETIC_DATA], []

    def _weights(self, job: SmokeJob, data_dir, stand_ins: list, problems: list) -> Staged:
        staged = Staged(job, data_dir, list(stand_ins), list(problems))
        own = requirements.own_weights(job.algorithm, job.dataset, job.fixed_hparams)
        if own is not None:  # weights the algorithm loads itself, which it alone can find
            if not own.ready:
                staged.problems.append(
                    f"{job.algorithm}'s pretrained weights: {'; '.join(own.details)}"
                )
            return staged
        files, problems = requirements.weight_files(job.algorithm, job.dataset, job.fixed_hparams)
        staged.problems += problems
        absent = [f for f in files if not f.present]
        if absent and self.synthetic_data_dir is None:
            staged.problems.append(
                f"pretrained weights missing: {weights.missing_weights_message(absent)}"
            )
        elif absent:
            try:
                self._random_weights(job, files)
            except UserError as error:  # e.g. DINOv2, whose torch.hub code cannot be made up
                staged.problems.append(f"{error}; {weights.missing_weights_message(absent)}")
                return staged
            staged.environment = {**self.random_caches.environment(), "HF_HUB_OFFLINE": "1"}
            staged.stand_ins.append(RANDOM_WEIGHTS)
        return staged

    def _random_weights(self, job: SmokeJob, files: list[WeightFile]) -> None:
        """Random weights for the absent ``files`` in the check's own cache, where the files the
        user has are linked."""
        found, _ = requirements.weight_files(
            job.algorithm, job.dataset, job.fixed_hparams, self.random_caches
        )
        ours = {place.model: place for place in found}
        for file in files:
            place = ours[file.model]
            if file.present:
                _link_cached(file, place)
            elif not place.present:
                (path,) = synthetic.write_random_weights([place])
                self.notes.append(
                    f"random weights (not pretrained) in {path} stand in for the missing "
                    f"{file.what} (looked for at {file.path}; to get it: {file.fetch}); "
                    "your caches are untouched"
                )


def _link_cached(file: WeightFile, place: WeightFile) -> None:
    """Make the cached ``file`` appear at ``place``, its location in another cache."""
    source, target = (
        (file.folder, place.folder) if file.layout == HF_SNAPSHOT else (file.path, place.path)
    )
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(source)
