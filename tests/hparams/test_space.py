"""Hparam declarations: DomainBed-style seeding and clear validation errors."""

import json

import numpy as np
import pytest
from domainbed.lib import misc

from dmg_domainbed.errors import UserError
from dmg_domainbed.hparams import HParam, HParamSpace, resolve_space

SPACE = HParamSpace(
    HParam("weight", 0.1, lambda r: 10 ** r.uniform(-2, 0), minimum=0.0),
    HParam("mode", "a", lambda r: str(r.choice(["a", "b"])), choices=("a", "b")),
    HParam("count", 3, lambda r: int(r.randint(1, 5))),
    HParam("flag", False, lambda r: bool(r.rand() < 0.5)),
)


def test_random_values_are_seeded_per_name_like_domainbed():
    resolved = resolve_space(SPACE, 7, misc.seed_hash)
    expected = 10 ** np.random.RandomState(misc.seed_hash(7, "weight")).uniform(-2, 0)
    assert resolved["weight"] == (0.1, expected)
    assert resolve_space(SPACE, 7, misc.seed_hash) == resolved
    assert resolve_space(SPACE, 8, misc.seed_hash)["weight"] != resolved["weight"]


def test_random_values_are_plain_python_and_json_serialisable():
    resolved = resolve_space(SPACE, 3, misc.seed_hash)
    randoms = {name: value for name, (_, value) in resolved.items()}
    assert all(type(v) in (float, int, str, bool) for v in randoms.values())
    json.dumps(randoms)


def test_a_plain_mapping_declaration_is_accepted():
    resolved = resolve_space({"alpha": (0.5, lambda r: r.uniform(0, 1))}, 0, misc.seed_hash)
    assert resolved["alpha"][0] == 0.5 and 0 <= resolved["alpha"][1] < 1


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("weight", -1.0, r"'weight' = -1.0 is not valid: it must be a number >= 0\."),
        ("weight", "high", r"'weight' = 'high' is not valid: it must be a number >= 0, not str"),
        ("weight", True, r"it must be a number >= 0, not bool"),
        ("weight", float("nan"), r"= nan is not valid: it must be a number >= 0"),
        ("weight", float("inf"), r"= inf is not valid: it must be a number >= 0"),
        ("mode", "c", r"'mode' = 'c' is not valid: it must be one of 'a', 'b'"),
        ("count", 2.5, r"'count' = 2.5 is not valid: it must be an integer, not float"),
        ("flag", 1, r"'flag' = 1 is not valid: it must be true or false, not int"),
    ],
)
def test_bad_values_are_rejected_with_what_is_allowed_and_a_fix(name, value, message):
    hparams = SPACE.defaults() | {name: value}
    with pytest.raises(UserError, match=message) as error:
        SPACE.validate(hparams, "Demo")
    assert "Demo hparam" in str(error.value) and "--hparams" in str(error.value)


def test_an_int_is_a_valid_float_and_defaults_validate():
    SPACE.validate(SPACE.defaults() | {"weight": 1}, "Demo")


def test_a_missing_hparam_is_named():
    hparams = SPACE.defaults()
    del hparams["count"]
    with pytest.raises(UserError, match="needs hparam 'count'"):
        SPACE.validate(hparams, "Demo")


def test_a_name_declared_twice_is_refused():
    with pytest.raises(ValueError, match="declared twice"):
        HParamSpace(HParam("a", 1, lambda r: 1), HParam("a", 2, lambda r: 2))
