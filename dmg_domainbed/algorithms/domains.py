"""Which source domain each example comes from.

DomainBed's ``update`` receives one minibatch per source domain, in increasing environment order
with the test environments left out; source domain ``d`` is the ``d``-th of those.
"""

from __future__ import annotations

import torch


def domain_labels(minibatches) -> torch.Tensor:
    """Source-domain index of every example of ``torch.cat`` over the minibatches."""
    return torch.cat(
        [torch.full((len(x),), d, device=x.device) for d, (x, _) in enumerate(minibatches)]
    )


def known_domains(domain, batch_size: int, num_domains: int, device) -> torch.Tensor:
    """``domain`` (an int or one index per example) as a LongTensor of ``batch_size`` indices."""
    domains = torch.as_tensor(domain, dtype=torch.long, device=device)
    if domains.dim() == 0:
        domains = domains.expand(batch_size)
    if domains.shape != (batch_size,):
        raise ValueError(
            f"domain must be an int or one index per example ({batch_size}); "
            f"got shape {tuple(domains.shape)}"
        )
    if len(domains) and (domains.min() < 0 or domains.max() >= num_domains):
        raise ValueError(
            f"source-domain indices must lie in 0..{num_domains - 1} (source domains are the "
            f"training environments in increasing order, test environments skipped); "
            f"got {sorted(set(domains.tolist()))}"
        )
    return domains
