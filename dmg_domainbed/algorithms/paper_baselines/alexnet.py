"""torchvision's ImageNet AlexNet as a featurizer: the backbone of the first block of every table
of the DMG paper (Tables 1-3), which DomainBed does not have.

The authors (prithv1/DMG) replace AlexNet's last layer (``classifier.6``, 4096 -> 1000) by a
new one for the task; here the featurizer is AlexNet up to that layer, so its ``n_outputs``
are the 4096 features of ``classifier.5`` and the task's layer is the algorithm's classifier.
The module names inside the featurizer are torchvision's (``features``, ``avgpool``,
``classifier.0`` .. ``classifier.5``), so the authors' masked layers ``classifier.1`` and
``classifier.4`` keep their names.
"""

from __future__ import annotations

import torch
import torchvision
from torch import nn

#: torchvision's ImageNet weights of AlexNet (``alexnet-owt-7be5be79.pth``), the weights the
#: authors' ``models.alexnet(pretrained=True)`` loaded.
WEIGHTS = "IMAGENET1K_V1"
#: The dropout layers of AlexNet's classifier, before ``classifier.1`` and ``classifier.4``.
DROPOUT_LAYERS = (0, 3)


class AlexNetFeaturizer(nn.Module):
    """AlexNet without its ImageNet layer: ``features``, ``avgpool``, then ``classifier.0``..5
    (dropout, linear 9216 -> 4096, ReLU, dropout, linear 4096 -> 4096, ReLU).

    ``dropout`` is the rate of both dropout layers (torchvision's is 0.5). Weights are loaded
    through torchvision's own path (``TORCH_HOME``/hub/checkpoints, downloaded when missing).
    """

    n_outputs = 4096

    def __init__(self, dropout: float, pretrained: bool = True) -> None:
        super().__init__()
        network = torchvision.models.alexnet(weights=WEIGHTS if pretrained else None)
        self.features = network.features
        self.avgpool = network.avgpool
        self.classifier = nn.Sequential(*list(network.classifier.children())[:-1])
        for index in DROPOUT_LAYERS:
            self.classifier[index].p = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))
