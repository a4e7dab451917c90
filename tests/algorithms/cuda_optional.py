"""A pytest plugin (``-p tests.algorithms.cuda_optional``) for DomainBed's own test modules on a
machine without a GPU: there, ``.cuda()`` of a module or a tensor returns it unchanged.

DomainBed's ``test_models`` moves every algorithm and minibatch to the GPU unconditionally; with
this plugin the same tests run on the CPU. Where a GPU is present nothing changes.
"""

import torch


def pytest_configure(config):
    if not torch.cuda.is_available():
        torch.nn.Module.cuda = lambda self, device=None: self
        torch.Tensor.cuda = lambda self, *args, **kwargs: self
