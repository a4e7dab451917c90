"""``D`` copies of a network run as one network whose layers hold the copies in channel groups.

ImportanceMask's phase 1 trains ``D`` copies of one network, each on its own domain's minibatch.
Run one after the other they cost ``D`` times the launches of one network. Here every layer of
the copies becomes one layer over ``D`` groups of channels, group ``d`` holding copy ``d``:

* a convolution of ``groups = g`` becomes one of ``groups = D g`` (its weights the copies',
  concatenated along the output channels);
* BatchNorm and GroupNorm normalise per channel or per group of channels, so one layer over the
  ``D C`` channels normalises each copy with its own statistics (BatchNorm's running statistics
  are the copies', concatenated);
* a linear layer becomes a grouped 1x1 convolution: one batched product for the ``D`` copies;
* layers without weights (ReLU, pooling, dropout, flattening) act on each channel alone.

The input of copy ``d`` is domain ``d``'s minibatch in channel group ``d`` (minibatches of one
size), so every copy computes exactly what it computes alone: the same losses, gradients and
BatchNorm statistics. The copies' state dict keys stay ``<d>.<name>`` (split and joined along
dim 0 on saving and loading), so a ``model.pkl`` is the same as with separate copies.

Only networks built of the layers above and whose forward passes keep the batch and channel
dims apart can be grouped: :func:`groupable` says which (DomainBed's ``ResNet``, ``MNIST_CNN``
and ``MLP`` featurizers and its linear classifiers).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from domainbed import networks
from torch import nn

#: Featurizers whose forward passes keep the batch and channel dims apart (DomainBed's
#: ``Wide_ResNet`` flattens with ``view(-1, channels)``, which would mix the copies).
GROUPABLE_FEATURIZERS = (networks.ResNet, networks.MNIST_CNN, networks.MLP)
#: Layers without weights that act on each channel alone.
CHANNELWISE = (
    networks.Identity,
    nn.ReLU,
    nn.Dropout,
    nn.Identity,
    nn.MaxPool2d,
    nn.AdaptiveAvgPool2d,
    nn.AvgPool2d,
    nn.Flatten,
    nn.Sequential,
    nn.ModuleList,
)


def groupable(network: nn.Module) -> bool:
    """Whether ``network`` (``featurizer`` then ``classifier``) can run as grouped copies."""
    if not isinstance(network.featurizer, GROUPABLE_FEATURIZERS):
        return False
    known = (nn.Conv2d, nn.BatchNorm2d, nn.GroupNorm, nn.Linear, *CHANNELWISE)
    inside = [m for name, m in network.named_modules() if name]
    return all(
        isinstance(m, known) or isinstance(m, GROUPABLE_FEATURIZERS) or _is_resnet_part(m)
        for m in inside
    )


def _is_resnet_part(module: nn.Module) -> bool:
    from torchvision.models import resnet

    return isinstance(module, resnet.ResNet | resnet.BasicBlock | resnet.Bottleneck)


class GroupedLinear(nn.Module):
    """``copies`` linear layers ``in -> out`` on ``[N, copies * in]``: a grouped 1x1 convolution.
    ``weight [copies * out, in]`` and ``bias [copies * out]`` are the layers', concatenated."""

    def __init__(self, copies: int, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.copies = copies
        self.weight = nn.Parameter(weight)
        self.bias = None if bias is None else nn.Parameter(bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.conv1d(x.unsqueeze(-1), self.weight.unsqueeze(-1), self.bias, groups=self.copies)
        return out.squeeze(-1)


def _joined(modules: list[nn.Module], name: str) -> torch.Tensor | None:
    tensors = [getattr(m, name) for m in modules]
    return None if tensors[0] is None else torch.cat([t.detach() for t in tensors]).clone()


def _grouped_layer(layers: list[nn.Module]) -> nn.Module:
    """One layer over the channel groups of ``layers`` (the same layer of every copy)."""
    first, copies = layers[0], len(layers)
    if isinstance(first, nn.Conv2d):
        grouped = copy.deepcopy(first)
        grouped.in_channels *= copies
        grouped.out_channels *= copies
        grouped.groups *= copies
    elif isinstance(first, nn.BatchNorm2d):
        grouped = copy.deepcopy(first)
        grouped.num_features *= copies
        for name in ("running_mean", "running_var"):
            setattr(grouped, name, _joined(layers, name))
    elif isinstance(first, nn.GroupNorm):
        grouped = copy.deepcopy(first)
        grouped.num_groups *= copies
        grouped.num_channels *= copies
    elif isinstance(first, nn.Linear):
        return GroupedLinear(copies, _joined(layers, "weight"), _joined(layers, "bias"))
    else:
        raise TypeError(f"no grouped form of {type(first).__name__}")
    for name in ("weight", "bias"):
        if getattr(first, name, None) is not None:
            setattr(grouped, name, nn.Parameter(_joined(layers, name)))
    return grouped


def _group(copies: list[nn.Module]) -> nn.Module:
    """A copy of ``copies[0]`` whose layers with weights are replaced by grouped ones."""
    grouped = copy.deepcopy(copies[0])
    parents = dict(grouped.named_modules())
    for name, module in copies[0].named_modules():
        if isinstance(module, nn.Conv2d | nn.BatchNorm2d | nn.GroupNorm | nn.Linear):
            layers = [dict(c.named_modules())[name] for c in copies]
            parent, _, child = name.rpartition(".")
            setattr(parents[parent], child, _grouped_layer(layers))
    return grouped


class GroupedCopies(nn.Module):
    """``D`` copies of a network (:func:`groupable`), run as one (see the module docstring).

    ``forward(inputs)`` takes one input per copy, ``[D, N, ...]``, and returns ``[D, N, K]``;
    its state dict holds the copies' keys, ``<d>.<name>``. Iterating gives each copy as a network
    of its own, copied out (for inspection: training it does not train the group)."""

    def __init__(self, network: nn.Module, copies: int) -> None:
        super().__init__()
        self.copies = copies
        self.grouped = _group([network] * copies)
        # the form of one copy, without memory, kept out of the state dict
        vars(self)["_template"] = copy.deepcopy(network).to("meta")
        self._register_state_dict_hook(_split_copies)
        self._register_load_state_dict_pre_hook(_join_copies, with_module=True)

    def __len__(self) -> int:
        return self.copies

    def forward(self, inputs: list[torch.Tensor]) -> torch.Tensor:
        """``[N, D, K]``: the outputs of copy ``d`` on ``inputs[d]`` (``N`` examples each)."""
        out = self.grouped(torch.cat(inputs, dim=1))  # copy d's input in channel group d
        return out.view(len(out), self.copies, -1)

    def one(self, copy_index: int, x: torch.Tensor) -> torch.Tensor:
        """Copy ``copy_index``'s output on ``x`` alone (for minibatches of unequal sizes): the
        one-copy network run on its slices of the grouped weights and statistics, which it
        trains and updates (BatchNorm's shared batch count advances once per copy)."""

        def own(tensor: torch.Tensor) -> torch.Tensor:
            return tensor if tensor.dim() == 0 else tensor.chunk(self.copies)[copy_index]

        tensors = {
            name: own(tensor)
            for name, tensor in [*self.grouped.named_parameters(), *self.grouped.named_buffers()]
        }
        template = vars(self)["_template"].train(self.training)
        return torch.func.functional_call(template, tensors, (x,))

    def __iter__(self) -> Iterator[nn.Module]:
        state = self.state_dict()
        like = next(self.grouped.parameters())
        for d in range(self.copies):
            one = copy.deepcopy(vars(self)["_template"]).to_empty(device=like.device)
            one.to(like.dtype)
            prefix = f"{d}."
            one.load_state_dict(
                {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
            )
            yield one.train(self.training)

    def copy_parameters(self, names: list[str]) -> torch.Tensor:
        """``[D, P]``: the parameters ``names`` (of one copy) of every copy, flattened."""
        params = dict(self.grouped.named_parameters())
        return torch.cat([params[name].reshape(self.copies, -1) for name in names], dim=1)


def _split_copies(module: GroupedCopies, state: dict, prefix: str, local_metadata) -> None:
    for key in [k for k in state if k.startswith(f"{prefix}grouped.")]:
        value = state.pop(key)
        name = key[len(f"{prefix}grouped.") :]
        parts = [value] * module.copies if value.dim() == 0 else value.chunk(module.copies)
        for d, part in enumerate(parts):
            state[f"{prefix}{d}.{name}"] = part


def _join_copies(module: GroupedCopies, state: dict, prefix: str, *args) -> None:
    names = {k[len(f"{prefix}0.") :] for k in state if k.startswith(f"{prefix}0.")}
    for name in names:
        parts = [state.pop(f"{prefix}{d}.{name}") for d in range(module.copies)]
        joined = parts[0] if parts[0].dim() == 0 else torch.cat(parts)
        state[f"{prefix}grouped.{name}"] = joined
