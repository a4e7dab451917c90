"""The data and weights of the smoke check's jobs (:mod:`.jobs`): a sample of an image dataset
(every domain and class folder, images enough for the job's batch: DomainBed evaluates every
split at a run's first and last step) and the weights it loads. What is missing stops the job,
named as doctor and the sweep name it; with ``--synthetic``, stand-ins
(:mod:`dmg_domainbed.synthetic`) replace it, random weights only in the check's own cache: the
user's caches are never written to."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from dmg_domainbed import synthetic
from dmg_domainbed.datasets.layouts import IMAGE_FOLDERS
from dmg_domainbed.errors import UserError
from dmg_domainbed.preflight import data, requirements, weights
from dmg_domainbed.smoke.jobs import SmokeJob
from dmg_domainbed.weight_files import HF_SNAPSHOT, Caches, WeightsCheck

SYNTHETIC_DATA, RANDOM_WEIGHTS = "synthetic data", "random weights"


@dataclass(frozen=True)
class Staged:
    """A job's ``--data_dir``, stand-ins, problems and extra environment variables."""

    job: SmokeJob
    data_dir: str | None
    stand_ins: list[str]
    problems: list[str]
    environment: dict[str, str]


def sample_image_folder(source: Path, target: Path, per_domain: int) -> None:
    """Link into ``target`` every domain and class folder of ``source`` and at least
    ``per_domain`` images per domain (where it has them), spread over the classes."""
    from torchvision.datasets.folder import IMG_EXTENSIONS  # ImageFolder's rule for an image

    for domain in sorted(p for p in source.iterdir() if p.is_dir()):
        classes = sorted(p for p in domain.iterdir() if p.is_dir())
        per_class = max(1, math.ceil(per_domain / max(1, len(classes))))
        for folder in classes:
            linked = target / domain.name / folder.name
            linked.mkdir(parents=True)
            images = sorted(p for p in folder.iterdir() if p.name.lower().endswith(IMG_EXTENSIONS))
            for image in images[:per_class]:
                (linked / image.name).symlink_to(image)


class Staging:
    """Prepares every job's data and weights under ``root``; stand-ins only with a
    ``synthetic_data_dir``, where synthetic datasets are written."""

    def __init__(self, root: Path, data_dir: str | None, synthetic_data_dir: Path | None = None):
        self.root, self.data_dir, self.synthetic_data_dir = root, data_dir, synthetic_data_dir
        self.random_caches = Caches.under(root / "random_weights")
        # what a job that reads stand-in weights runs with: the check's own cache, offline
        self.stand_in_env = {**self.random_caches.environment(), "HF_HUB_OFFLINE": "1"}
        self.own_written: set[str] = set()  # architectures of algorithms' own weights written
        self.notes: list[str] = []

    def stage(self, jobs: list[SmokeJob]) -> list[Staged]:
        """Each dataset is staged once, for its job with the largest batch."""
        data = {}
        for dataset in dict.fromkeys(job.dataset for job in jobs):
            of_dataset = [job for job in jobs if job.dataset == dataset]
            data[dataset] = self._data(max(of_dataset, key=lambda job: job.batch_size))
        staged = []
        for job in jobs:
            data_dir, stand_ins, problems = data[job.dataset]
            environment, more_stand_ins, more_problems = self._weights(job)
            stand_ins, problems = stand_ins + more_stand_ins, problems + more_problems
            staged.append(Staged(job, data_dir, stand_ins, problems, environment))
        return staged

    def _data(self, job: SmokeJob) -> tuple[str | None, list[str], list[str]]:
        """The ``--data_dir`` of ``job``'s dataset, its stand-ins and the problems."""
        found = requirements.data_status(job.dataset, self.data_dir)
        holdout = job.train_args["holdout_fraction"]
        if found.state == data.PRESENT and job.dataset in IMAGE_FOLDERS:
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
        if found.ok:  # nothing to sample: files not in image folders, no files, layout unknown
            return self.data_dir, [], []
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

    def _weights(self, job: SmokeJob) -> tuple[dict[str, str], list[str], list[str]]:
        """The environment, stand-ins and problems of ``job``'s pretrained weights; stand-ins go
        to the check's own cache, where the user's files are linked."""
        own = requirements.own_weights(job.algorithm, job.dataset, job.fixed_hparams)
        if own is not None:  # weights the algorithm loads itself, which it alone can find
            return self._own_weights(job, own)
        files, problems = requirements.weight_files(job.algorithm, job.dataset, job.fixed_hparams)
        absent = [f for f in files if not f.present]
        if not absent:
            return {}, [], problems
        missing = weights.missing_weights_message(absent)
        if self.synthetic_data_dir is None:
            return {}, [], [*problems, f"pretrained weights missing: {missing}"]
        found, _ = requirements.weight_files(
            job.algorithm, job.dataset, job.fixed_hparams, self.random_caches
        )
        ours = {place.model: place for place in found}
        try:
            for file in absent:  # none is written twice: an earlier job's is present
                for path in synthetic.write_random_weights([ours[file.model]]):
                    self.notes.append(
                        f"random weights (not pretrained) in {path} stand in for the missing "
                        f"{file.what} (looked for at {file.path}; to get it: {file.fetch}); "
                        "your caches are untouched"
                    )
        except UserError as error:  # e.g. DINOv2, whose torch.hub code cannot be made up
            return {}, [], [*problems, f"{error}; {missing}"]
        for file in [f for f in files if f.present]:
            snapshot = file.layout == HF_SNAPSHOT  # a folder, linked whole
            target = ours[file.model].folder if snapshot else ours[file.model].path
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(file.folder if snapshot else file.path)
        return self.stand_in_env, [RANDOM_WEIGHTS], problems

    def _own_weights(
        self, job: SmokeJob, own: WeightsCheck
    ) -> tuple[dict[str, str], list[str], list[str]]:
        """:meth:`_weights` for weights an algorithm loads itself: random ones in the first place
        it looks at that is in a cache (a file an hparam names is never made up)."""
        if own.ready:
            return {}, [], []
        why = f"{job.algorithm}'s pretrained weights: {'; '.join(own.details)}"
        if self.synthetic_data_dir is None:
            return {}, [], [why]
        current = Caches.current()
        places = (self.random_caches.holding(file, current) for file in own.locations)
        place = next(filter(None, places), None)
        if place is None:
            return {}, [], [why]
        if place.model not in self.own_written:  # once per architecture
            try:
                (path,) = synthetic.write_random_weights([place])
            except UserError as error:
                return {}, [], [f"{why}; {error}"]
            self.own_written.add(place.model)
            self.notes.append(
                f"random weights (not pretrained) in {path} stand in for {job.algorithm}'s missing "
                f"{place.what}; your caches are untouched"
            )
        return self.stand_in_env, [RANDOM_WEIGHTS], []
