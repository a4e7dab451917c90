"""Rebuilding a trained algorithm and its dataset exactly as DomainBed's train.py built them."""

from __future__ import annotations

import torch

from dmg_domainbed.errors import UserError
from dmg_domainbed.reporting.runs import Run, require_model


def device() -> str:
    """The device train.py picks: CUDA when available."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_algorithm(run: Run, on: str | None = None) -> torch.nn.Module:
    """The algorithm saved in the run's ``model.pkl``, in eval mode.

    Built as DomainBed's scripts reload models: ``torch.load(..., weights_only=False)``, then
    ``algorithm_class(model_input_shape, model_num_classes, model_num_domains, model_hparams)``
    and ``load_state_dict(model_dict)``.
    """
    from domainbed import algorithms

    path = require_model(run)
    checkpoint = torch.load(path, map_location=on or device(), weights_only=False)
    try:
        algorithm_class = algorithms.get_algorithm_class(checkpoint["args"]["algorithm"])
    except NotImplementedError as error:
        raise UserError(
            f"'{path}' was trained with algorithm '{checkpoint['args']['algorithm']}', which "
            f"this DomainBed does not know ({error}). Install the package that provides it."
        ) from None
    algorithm = algorithm_class(
        checkpoint["model_input_shape"],
        checkpoint["model_num_classes"],
        checkpoint["model_num_domains"],
        checkpoint["model_hparams"],
    )
    algorithm.load_state_dict(checkpoint["model_dict"])
    return algorithm.to(on or device()).eval()


def load_dataset(run: Run, data_dir: str | None = None, augment: bool = True):
    """The run's dataset, built with train.py's arguments and hparams (``data_dir`` overrides);
    ``augment=False`` switches DomainBed's training augmentation off."""
    from domainbed import datasets

    root = data_dir if data_dir is not None else run.args.get("data_dir")
    hparams = run.hparams if augment else {**run.hparams, "data_augmentation": False}
    try:
        dataset_class = datasets.get_dataset_class(run.dataset)
    except NotImplementedError:
        raise UserError(
            f"run '{run.path}' used dataset '{run.dataset}', which DomainBed does not know here."
        ) from None
    try:
        return dataset_class(root, run.test_envs, hparams)
    except (OSError, RuntimeError, ValueError) as error:
        raise UserError(
            f"cannot load dataset {run.dataset} from data_dir '{root}' "
            f"({type(error).__name__}: {error}). Pass --data_dir with the folder the run "
            "was trained on."
        ) from None


def augmented_evaluation(run: Run) -> bool:
    """Whether train.py classified the training domains' held-out images augmented.

    DomainBed's image and WILDS datasets give a training domain's whole dataset the training
    augmentation when ``data_augmentation`` is on (its default), held-out split included, so
    the ``env<i>_out_acc`` train.py logs for those domains come from randomly augmented images.
    """
    from domainbed import datasets

    augmenting = tuple(
        getattr(datasets, name)
        for name in ("MultipleEnvironmentImageFolder", "WILDSDataset", "SpawriousBenchmark")
        if hasattr(datasets, name)
    )
    dataset_class = datasets.get_dataset_class(run.dataset)
    return bool(run.hparams.get("data_augmentation")) and issubclass(dataset_class, augmenting)
