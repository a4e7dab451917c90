"""Layers named by an hparam: the accepted values and the error for a name that does not exist."""

import pytest
from torch import nn

from dmg_domainbed.algorithms import named_layers
from dmg_domainbed.errors import UserError

pytestmark = pytest.mark.no_domainbed

NETWORK = nn.Sequential()
NETWORK.add_module("featurizer", nn.Sequential(nn.Linear(3, 4), nn.ReLU()))
NETWORK.add_module("classifier", nn.Linear(4, 2))


@pytest.mark.parametrize("value", ["auto", "classifier", ["featurizer.0", "classifier"]])
def test_auto_one_name_or_a_list_are_valid(value):
    named_layers.check_value(value)


@pytest.mark.parametrize("value", ["", [], [""], ["classifier", 3], 3, None])
def test_anything_else_is_refused_with_an_example(value):
    with pytest.raises(ValueError, match="give 'auto', one layer name, or a list"):
        named_layers.check_value(value)


def test_resolve_gives_the_names_a_value_stands_for():
    assert named_layers.resolve("auto", lambda: ["classifier"]) == ["classifier"]
    assert named_layers.resolve("featurizer.0", lambda: []) == ["featurizer.0"]
    assert named_layers.resolve(["a", "b"], lambda: []) == ["a", "b"]


def test_modules_are_found_by_name_and_an_unknown_name_lists_the_valid_ones():
    found = named_layers.modules_named(NETWORK, ["classifier", "featurizer.0"], "mask")
    assert found == [NETWORK.classifier, NETWORK.featurizer[0]]
    with pytest.raises(UserError) as error:
        named_layers.modules_named(NETWORK, ["featurizer.9"], "mask")
    assert str(error.value) == (
        "cannot mask layers ['featurizer.9']: unknown ['featurizer.9']. Valid layer names: "
        "featurizer, featurizer.0, featurizer.1, classifier"
    )
