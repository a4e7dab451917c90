"""A record of the torch functions a block of code calls, with their tensor arguments."""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

#: Calls that copy a tensor's value to the host (a device synchronisation on a GPU).
HOST_READS = ("__int__", "__float__", "__bool__", "__index__", "item", "tolist")


class TorchCalls(TorchFunctionMode):
    """``with TorchCalls() as calls: ...`` records ``(name, tensor arguments)`` of each call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, list[torch.Tensor]]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        self.calls.append((getattr(func, "__name__", str(func)), tensors))
        return func(*args, **kwargs)

    def named(self, name: str) -> list[tuple[str, list[torch.Tensor]]]:
        return [call for call in self.calls if call[0] == name]

    def host_reads(self) -> list[tuple[str, list[torch.Tensor]]]:
        return [call for call in self.calls if call[0] in HOST_READS]
