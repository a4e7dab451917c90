"""MultiHead: a shared featurizer, one linear head per source domain."""

import torch
import torch.nn.functional as F
from domainbed import algorithms

from dmg_domainbed.algorithms.paper_baselines.multihead import MultiHead

from ..conftest import build, minibatches


def head_logits(model, x, d):
    return F.linear(model.featurizer(x), model.head_weight[d], model.head_bias[d])


def test_registered_in_domainbed():
    assert algorithms.get_algorithm_class("MultiHead") is MultiHead


def test_predict_averages_the_raw_logits_of_all_heads():
    model = build("MultiHead")
    model.eval()
    x = torch.randn(5, 3, 28, 28)
    expected = torch.stack([head_logits(model, x, d) for d in range(3)]).mean(0)
    assert torch.allclose(model.predict(x), expected, atol=1e-5)


def test_known_domain_prediction_uses_the_examples_own_head():
    model = build("MultiHead")
    model.eval()
    x = torch.randn(4, 3, 28, 28)
    domains = torch.tensor([2, 0, 1, 2])
    got = model.predict_known_domain(x, domains)
    for n, d in enumerate(domains.tolist()):
        assert torch.allclose(got[n], head_logits(model, x[n : n + 1], d)[0], atol=1e-5)


def test_training_routes_each_example_to_its_own_head_only():
    model = build("MultiHead")
    before = model.head_weight.detach().clone()
    batches = minibatches()
    empty = (batches[1][0][:0], batches[1][1][:0])
    model.update([batches[0], empty, batches[2]])
    changed = [(model.head_weight[d] - before[d]).abs().max().item() > 0 for d in range(3)]
    assert changed == [True, False, True]
