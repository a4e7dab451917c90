"""Where pretrained weight files live: the caches torch.hub, torchvision and timm read, one file a
run needs, and an algorithm's account of the weights it loads. Descriptions only (nothing is
opened or downloaded), shared by the checks, the algorithms and :mod:`dmg_domainbed.synthetic`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

# Where a file sits in its cache: a torch.hub checkpoint file, a Hugging Face hub snapshot, or
# a torch.hub repository of code.
TORCH_HUB_FILE, HF_SNAPSHOT, TORCH_HUB_REPO = "torch hub file", "hf snapshot", "torch hub repo"


@dataclass(frozen=True)
class Caches:
    """The two caches DomainBed's networks load pretrained weights from."""

    torch_hub: Path  # torch.hub.get_dir(): $TORCH_HOME/hub
    hf_hub: Path  # huggingface_hub's cache: $HF_HUB_CACHE, else $HF_HOME/hub

    @classmethod
    def current(cls) -> Caches:
        """The caches this process (and a job started with its environment) reads."""
        import torch
        from huggingface_hub import constants

        return cls(Path(torch.hub.get_dir()), Path(constants.HF_HUB_CACHE))

    @classmethod
    def under(cls, root: Path) -> Caches:
        """Both caches inside ``root``, for a process started with :meth:`environment`."""
        root = Path(root).absolute()
        return cls(root / "torch" / "hub", root / "huggingface" / "hub")

    def holding(self, file: WeightFile, source: Caches) -> WeightFile | None:
        """Where ``file``, a place in the ``source`` caches, is in these caches (not present
        there yet: :mod:`dmg_domainbed.synthetic` may write it); None for a file outside both
        of ``source``'s caches (e.g. one an hparam names)."""
        for theirs, ours in ((source.hf_hub, self.hf_hub), (source.torch_hub, self.torch_hub)):
            if file.folder.is_relative_to(theirs):
                folder = ours / file.folder.relative_to(theirs)
                return dataclasses.replace(file, folder=folder, present=False)
        return None

    def environment(self) -> dict[str, str]:
        """Environment variables that make torch.hub, torchvision and timm read these caches."""
        return {
            "TORCH_HOME": str(self.torch_hub.parent),
            "HF_HOME": str(self.hf_hub.parent),
            "HF_HUB_CACHE": str(self.hf_hub),
        }


@dataclass(frozen=True)
class WeightFile:
    """One file a run needs: what it is, where the loader looks for it, how to get it there.

    ``model`` names the architecture the file holds weights of (``torchvision:resnet50``,
    ``timm:resnet50.ram_in1k``); ``layout`` says how its cache stores it.
    """

    what: str
    folder: Path
    filename: str
    present: bool
    fetch: str
    model: str = ""
    layout: str = TORCH_HUB_FILE

    @property
    def path(self) -> Path:
        return self.folder / self.filename


@dataclass(frozen=True)
class WeightsCheck:
    """What ``check_weights(hparams)`` of an algorithm that loads its own weights returns: where
    its loader looks, in order (``locations``), whether the run would load them (``ready``),
    what was found and how to get them (``details``)."""

    locations: tuple[WeightFile, ...]
    ready: bool
    details: tuple[str, ...]
