"""Aggregate: DMG's network and optimiser without masks (the clean ablation)."""

import torch
import torch.nn.functional as F
from domainbed import algorithms

from dmg_domainbed.algorithms.paper_baselines.aggregate import Aggregate

from ..conftest import build, minibatches


def test_registered_in_domainbed():
    assert algorithms.get_algorithm_class("Aggregate") is Aggregate


def test_same_network_and_initialisation_as_dmg():
    torch.manual_seed(3)
    aggregate = build("Aggregate")
    torch.manual_seed(3)
    dmg = build("DMG")
    ours = dict(aggregate.network.named_parameters())
    theirs = dict(dmg.network.named_parameters())
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_update_minimises_cross_entropy_on_the_pooled_batches():
    model = build("Aggregate")
    batches = minibatches()
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    with torch.no_grad():
        expected = F.cross_entropy(model.predict(x), y).item()
    assert abs(model.update(batches)["loss"] - expected) < 1e-5
