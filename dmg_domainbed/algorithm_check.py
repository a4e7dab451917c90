"""``check-algorithm``: what DomainBed's own tests and this package's contract tests ask of an
algorithm, run on any registered one (DomainBed's, this package's or another package's).

DomainBed's ``test_models`` builds each algorithm on its debug datasets with the default
hparams, runs three updates of 8 images per domain and checks the shape of ``predict``;
``test_hparams_registry`` checks that random hparams are the same for the same seed. DomainBed's
``train`` then needs more than its tests check: ``update`` returns a dict of numbers it
averages and writes to ``results.jsonl``, a checkpoint (``state_dict()``) restores the model,
and ``.to(device)`` moves everything the model computes with. Here each of these is one check
with a :class:`Finding` that says what was expected, what was found and where:

=================== ===========================================================================
``import``          the entry point loads (a failure shows the plugin's traceback) and names a
                    subclass of DomainBed's ``Algorithm``
``hparams``         DomainBed's registry gives its default hparams on the dataset (a malformed
                    ``HPARAMS`` is named with its file and line)
``random hparams``  ``random_hparams(name, dataset, seed)`` is the same twice, on every dataset,
                    and each declared sampler draws values its declaration allows, for every job
                    of DomainBed's default sweep
``hparam names``    no declared name silently replaces one of DomainBed's (an override is an
                    ``HParam(..., where_defined=True)``)
``build``           ``cls(input_shape, num_classes, num_domains, hparams)`` on the debug dataset,
                    built with the same hparams: the hparam names rule of every run applies
``update``          three updates, each returning ``{name: float}`` of finite numbers
``predict``         logits of shape ``[images, classes]`` on the images' device, the same twice
                    in eval mode
``state dict``      a new instance loaded with ``state_dict()`` predicts the same logits
``to(device)``      after ``.to("meta")`` no tensor of the model is left on the CPU
=================== ===========================================================================

Every check runs unless one it needs (:data:`NEEDS`) failed; such a check is listed as not run,
with the reason.

``Debug224`` builds DomainBed's ResNet-50 from its pretrained weights; it is checked only when
asked for (``--dataset Debug224``), where those weights are cached.
"""

from __future__ import annotations

import inspect
import io
import math
import re
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dmg_domainbed.errors import UserError
from dmg_domainbed.rules import with_article
from dmg_domainbed.shortlist import shortlist

DEBUG_DATASETS = ("Debug28", "Debug224")
BATCH_SIZE = 8  # images per domain, as DomainBed's test_models
DEBUG_IMAGES = 16  # per domain in DomainBed's debug datasets
UPDATES = 3  # as DomainBed's test_models
SEEDS = (0,)  # as DomainBed's test_hparams_registry
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
OK, FAIL, SKIP = "ok", "FAIL", "skip"
#: The hparams seeds and trials of DomainBed's default sweep (``n_hparams`` 20, ``n_trials``
#: 3): a job draws its hparams from ``seed_hash(hparams_seed, trial_seed)``; seed 0 keeps the
#: defaults.
SWEEP_HPARAMS_SEEDS, SWEEP_TRIALS = range(1, 20), range(3)
#: Each check and the checks whose outcome it needs; a check whose needs failed is not run.
NEEDS = {
    "import": (),
    "hparams": ("import",),
    "random hparams": ("hparams",),
    "hparam names": ("hparams",),
    "build": ("hparams",),
    "update": ("build",),
    "predict": ("build",),
    "state dict": ("predict",),
    "to(device)": ("build",),
}
# Why a check needs another, for the line of a check that was not run.
_WHY = {
    "state dict": "it compares a reloaded instance's predictions with predict's",
}


@dataclass(frozen=True)
class Finding:
    """The outcome of one check: its name, its status (``ok``, ``FAIL``, or ``skip``: not run,
    because a check it needs failed) and what was seen (on failure: what was expected, what was
    found and where)."""

    check: str
    status: str
    detail: str

    @property
    def passed(self) -> bool:
        return self.status == OK


def _finding(check: str, passed: bool, detail: str) -> Finding:
    return Finding(check, OK if passed else FAIL, detail)


def _where(cls: type, method: str) -> str:
    """``module.Class.method (file:line)`` of the code that defines ``method`` for ``cls``."""
    function = getattr(cls, method, None)
    owner = next((k for k in cls.__mro__ if method in vars(k)), cls)
    place = f"{owner.__module__}.{owner.__qualname__}.{method}"
    try:
        path = inspect.getsourcefile(function)
        line = inspect.getsourcelines(function)[1]
    except (OSError, TypeError):
        return place
    return f"{place} ({path}:{line})"


def _declared_at(component: Any) -> str:
    """``module.Class.HPARAMS (file:line)``: where ``component``'s ``HPARAMS`` is assigned."""
    owner = next((k for k in getattr(component, "__mro__", ()) if "HPARAMS" in vars(k)), component)
    place = f"{owner.__module__}.{owner.__qualname__}.HPARAMS"
    try:
        lines, first = inspect.getsourcelines(owner)
        path = inspect.getsourcefile(owner)
    except (OSError, TypeError):
        return place
    offset = next((i for i, line in enumerate(lines) if re.match(r"\s*HPARAMS\b", line)), 0)
    return f"{place} ({path}:{first + offset})"


def _trace(error: BaseException) -> str:
    return "".join(traceback.format_exception(error)).rstrip()


def algorithm_class(name: str) -> type:
    """The class DomainBed's ``get_algorithm_class`` gives ``name``; :class:`UserError` for a
    name nothing registers (with the registered names),
    :class:`~dmg_domainbed.integration.PluginImportError` for a plugin that does not import
    (loaded first, so that the registration does not also report it on stderr)."""
    import dmg_domainbed
    from dmg_domainbed import integration

    declared = name in integration.entry_points(integration.ALGORITHM_GROUP)
    if declared:
        integration.load(integration.ALGORITHM_GROUP, name, report=False)
    dmg_domainbed.register()
    from domainbed import algorithms

    if not declared and name not in algorithms.ALGORITHMS:
        raise UserError(
            f"no algorithm {name!r} is registered: DomainBed's and its plugins' are "
            f"{', '.join(algorithms.ALGORITHMS)}. A plugin's name is the one on the left of its "
            'entry-point line under [project.entry-points."domainbed.algorithms"]; is its '
            "package installed (pip install -e .) in this Python?"
        )
    return algorithms.get_algorithm_class(name)


def check_algorithm(
    name: str, dataset: str = "Debug28", images_per_domain: int = BATCH_SIZE
) -> list[Finding]:
    """Every check of this module on algorithm ``name``, built on the debug ``dataset``, with
    minibatches of ``images_per_domain`` images per domain. A check whose needs
    (:data:`NEEDS`) failed is listed as not run, with the reason."""
    if dataset not in DEBUG_DATASETS:
        raise UserError(
            f"--dataset {dataset!r}: the check builds on DomainBed's debug datasets, "
            f"{' or '.join(DEBUG_DATASETS)}"
        )
    if not 1 <= images_per_domain <= DEBUG_IMAGES:
        raise UserError(
            f"--images_per_domain {images_per_domain}: DomainBed's debug datasets hold "
            f"{DEBUG_IMAGES} images per domain; give 1 to {DEBUG_IMAGES} (default {BATCH_SIZE}, "
            "as DomainBed's test_models)"
        )
    from dmg_domainbed import integration

    found: dict[str, Finding] = {}
    runs = _Runs(found)
    try:  # a name nothing registers is refused (UserError) before any check
        loaded = algorithm_class(name)
    except integration.PluginImportError as error:
        loaded = error
    cls = runs.run("import", lambda: _import(name, loaded))
    runs.run("hparams", lambda: _default_hparams(name, dataset))
    runs.run("random hparams", lambda: _random_hparams(name))
    runs.run("hparam names", lambda: _shadowing(name))
    built = runs.run("build", lambda: _build(cls, name, dataset, images_per_domain))
    if built is not None:
        algorithm, build, minibatches, classes = built
        runs.run("update", lambda: _updates(algorithm, minibatches))
        x = minibatches[0][0]
        logits = runs.run("predict", lambda: _predictions(algorithm, x, classes, dataset))
        runs.run("state dict", lambda: _reload(algorithm, build(1), x, logits))
        runs.run("to(device)", lambda: _device_move(build(2)))
    for check in NEEDS:
        runs.run(check, lambda: None)  # those not reached: listed as not run, with the reason
    return [found[check] for check in NEEDS]


class _Runs:
    """Runs each check once its needs passed; records its finding (or why it was not run)."""

    def __init__(self, found: dict[str, Finding]) -> None:
        self.found = found
        self.causes: dict[str, str] = {}  # check not run -> the failed check that stopped it

    def run(self, check: str, body):
        """``body()`` gives ``(value, finding)``; returns the value, ``None`` if not run."""
        if check in self.found:
            return None
        unmet = [need for need in NEEDS[check] if not self.found[need].passed]
        if unmet:
            need = unmet[0]
            cause = self.causes[check] = self.causes.get(need, need)
            which = "which failed" if cause == need else f"which was not run ({cause} failed)"
            why = _WHY.get(check, f"it needs {need}")
            self.found[check] = Finding(check, SKIP, f"not run: {why}, {which}")
            return None
        try:
            value, finding = body()
        except Exception as error:  # a check the plugin broke in a way not foreseen above
            value, finding = None, _finding(check, False, f"the check raised:\n{_trace(error)}")
        self.found[check] = finding
        return value


def _import(name: str, cls: Any):
    """(the class, finding): the entry point loaded (``cls`` is not the
    :class:`~dmg_domainbed.integration.PluginImportError` it raised) and names a DomainBed
    ``Algorithm``."""
    from domainbed.algorithms import Algorithm

    from dmg_domainbed import integration

    if isinstance(cls, integration.PluginImportError):
        return None, _finding("import", False, str(cls))
    if isinstance(cls, type) and issubclass(cls, Algorithm):
        return cls, _finding("import", True, f"{cls.__module__}.{cls.__qualname__}")
    entry_point = integration.entry_points(integration.ALGORITHM_GROUP)[name]
    kind = "a class" if isinstance(cls, type) else with_article(type(cls).__name__)
    return None, _finding(
        "import",
        False,
        f"'{name} = {entry_point.value}' names {kind}, not a subclass of DomainBed's "
        "domainbed.algorithms.Algorithm: DomainBed's train builds the algorithm as "
        f"{name}(input_shape, num_classes, num_domains, hparams) and calls its update and "
        "predict. Point the entry point at the algorithm's class.",
    )


def _default_hparams(name: str, dataset: str):
    from domainbed import hparams_registry

    from dmg_domainbed import integration
    from dmg_domainbed.hparams.space import MalformedHParams

    try:
        hparams_registry.default_hparams(name, dataset)
    except MalformedHParams as error:
        component = integration.require(integration.ALGORITHM_GROUP, name)
        return None, _finding("hparams", False, f"{_declared_at(component)}: {error}")
    except Exception as error:
        call = f"hparams_registry.default_hparams({name!r}, {dataset!r})"
        return None, _finding("hparams", False, f"{call} raised:\n{_trace(error)}")
    return None, _finding("hparams", True, f"default hparams on {dataset}")


def _random_hparams(name: str):
    """Random hparams are the same per seed on every dataset (DomainBed's
    ``test_hparams_registry``), and each declared sampler draws values its declaration allows,
    for every job of DomainBed's default sweep (:func:`_draws`)."""
    from domainbed import datasets, hparams_registry

    differing = []
    for each in datasets.DATASETS:
        for seed in SEEDS:
            first = hparams_registry.random_hparams(name, each, seed)
            second = hparams_registry.random_hparams(name, each, seed)
            differing += [
                f"{key!r} on {each}, seed {seed}: {first[key]!r} then {second.get(key)!r}"
                for key in first
                if first[key] != second.get(key)
            ]
    if differing:
        detail = (
            "random_hparams(name, dataset, seed) must give the same values for the same seed "
            "(DomainBed's test_hparams_registry; a sweep's jobs rely on it), but gave:\n  "
            + shortlist(differing, 10, "\n  ", "\n  and ")
            + "\nA sampler must draw only from the numpy RandomState it is given."
        )
        return None, _finding("random hparams", False, detail)
    drawn, bad = _draws(name)
    if bad:
        return None, _finding("random hparams", False, bad)
    same = f"same per seed on {len(datasets.DATASETS)} datasets"
    if drawn:
        jobs = len(SWEEP_HPARAMS_SEEDS) * len(SWEEP_TRIALS)
        same += f"; the {drawn} declared keep their rules in the {jobs} jobs of a default sweep"
    return None, _finding("random hparams", True, same)


def _draws(name: str) -> tuple[int, str | None]:
    """How many hparams ``name`` declares, and what their samplers draw that their own
    declaration (or the bounds every run trains within) refuses, for the jobs of DomainBed's
    default sweep (``None``: nothing).

    A job of hparams seed ``h`` and trial ``t`` draws each hparam from
    ``RandomState(seed_hash(seed_hash(h, t), name))``, whatever the dataset.
    """
    from domainbed.lib import misc

    from dmg_domainbed import integration
    from dmg_domainbed.hparams.space import declared_rules
    from dmg_domainbed.hparams.trainable import TRAINABLE

    if name not in integration.entry_points(integration.ALGORITHM_GROUP):
        return 0, None  # DomainBed's own samplers
    component = integration.require(integration.ALGORITHM_GROUP, name)
    space = getattr(component, "HPARAMS", None)
    rules = declared_rules(space) if space is not None else []
    seeds = [(h, t) for h in SWEEP_HPARAMS_SEEDS for t in SWEEP_TRIALS]
    lines = []
    for key, sample, rule in rules:
        keeps = [rule, TRAINABLE[key]] if key in TRAINABLE else [rule]
        refused = []
        for h, t in seeds:
            value = sample(np.random.RandomState(misc.seed_hash(misc.seed_hash(h, t), key)))
            value = value.item() if isinstance(value, np.generic) else value
            problem = next((p for r in keeps if (p := r.problem(value)) is not None), None)
            if problem is not None:
                refused.append((h, t, value, problem))
        if refused:
            h, t, value, problem = refused[0]
            lines.append(
                f"{key!r}: {len(refused)} of {len(seeds)} draws are refused, e.g. {value!r} "
                f"(hparams seed {h}, trial {t}): {problem}"
            )
    if not lines:
        return len(rules), None
    return len(rules), (
        f"the samplers of {_declared_at(component)} draw values their declaration refuses; "
        "a random-search job that draws one stops when it starts (a PluginAlgorithm checks "
        "its hparams when built) or trains with a value outside the declared range:\n  "
        + "\n  ".join(lines)
        + f"\nDraw only allowed values (over the {len(seeds)} jobs of DomainBed's default sweep, "
        f"hparams seeds {SWEEP_HPARAMS_SEEDS.start}-{SWEEP_HPARAMS_SEEDS.stop - 1} x trials "
        f"{SWEEP_TRIALS.start}-{SWEEP_TRIALS.stop - 1}), or widen the declared range."
    )


def _shadowing(name: str):
    """Declared hparams whose names DomainBed's registry already gives ``name``: the plugin's
    value silently replaces DomainBed's unless the declaration says it is an override."""
    from domainbed import datasets

    from dmg_domainbed import integration

    if name not in integration.entry_points(integration.ALGORITHM_GROUP):
        return None, _finding("hparam names", True, "DomainBed's own algorithm: DomainBed's names")
    space = getattr(integration.require(integration.ALGORITHM_GROUP, name), "HPARAMS", None)
    shadowed: dict[str, list[str]] = {}
    for each in datasets.DATASETS:
        own = integration.domainbed_hparams(name, each, 0)
        if isinstance(space, Mapping):
            names = [key for key in space if key in own]
        else:
            names = [
                h.name
                for h in space or ()
                if h.name in own and h.applies(each, own) and not h.where_defined
            ]
        for key in names:
            shadowed.setdefault(key, []).append(each)
    if not shadowed:
        return None, _finding("hparam names", True, "none replaces one of DomainBed's")
    listed = "; ".join(f"{key!r} (on {', '.join(on)})" for key, on in shadowed.items())
    return None, _finding(
        "hparam names",
        False,
        f"{name}.HPARAMS declares names DomainBed's registry already defines for {name}: "
        f"{listed}. Its value silently replaces DomainBed's. Rename the hparam, or, to change "
        "DomainBed's value on purpose, declare it as dmg_domainbed.hparams.HParam(name, default, "
        "sampler, where_defined=True) in an HParamSpace.",
    )


def _minibatches(dataset, images: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``images`` images and labels per environment, as DomainBed's test helpers make them
    (on the CPU)."""
    batches = []
    for environment in dataset:
        items = [environment[i] for i in range(images)]
        x = torch.stack([x for x, _ in items])
        y = torch.stack([torch.as_tensor(y) for _, y in items])
        batches.append((x, y))
    return batches


def _build(cls: type, name: str, dataset_name: str, images: int):
    """((the algorithm, ``build(seed)`` for more instances, minibatches, classes), finding)."""
    from domainbed import datasets, hparams_registry

    hparams = hparams_registry.default_hparams(name, dataset_name)
    dataset = datasets.get_dataset_class(dataset_name)("", [], hparams)
    shape, classes, domains = dataset.input_shape, dataset.num_classes, len(dataset)
    call = f"{name}({tuple(shape)}, {classes}, {domains}, hparams)"

    def build(seed: int):
        torch.manual_seed(seed)
        return cls(shape, classes, domains, hparams)

    try:
        algorithm = build(0)
    except Exception as error:
        detail = f"{call} with {dataset_name}'s default hparams raised:\n{_trace(error)}"
        return None, _finding("build", False, detail)
    return (algorithm, build, _minibatches(dataset, images), classes), _finding("build", True, call)


def _updates(algorithm, minibatches):
    cls = type(algorithm)
    where = _where(cls, "update")
    expected = (
        "update(minibatches) must return a dict {name: float}: DomainBed's train averages "
        "each value and writes it to results.jsonl"
    )
    for step in range(1, UPDATES + 1):
        try:
            result = algorithm.update(minibatches)
        except Exception as error:
            return None, _finding("update", False, f"update {step} raised:\n{_trace(error)}")
        if not isinstance(result, Mapping):
            detail = f"{expected}; {where} returned {type(result).__name__}"
            return None, _finding("update", False, detail)
        for key, value in result.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                kind = f"{type(value).__module__}.{type(value).__qualname__}"
                return None, _finding(
                    "update",
                    False,
                    f"{expected}; {where} returned {key!r}: {kind}. Return a Python number "
                    "(e.g. loss.item() for a tensor).",
                )
            if not math.isfinite(value):
                return None, _finding(
                    "update",
                    False,
                    f"update {step} of {UPDATES} returned {key!r}: {value} ({where}), on "
                    "DomainBed's debug data with the default hparams: the model no longer "
                    "trains (a NaN loss leaves NaN weights). Look for a division by zero, a log "
                    "of 0 or a learning rate too large.",
                )
    return None, _finding(
        "update", True, f"{UPDATES} updates, each {{{', '.join(result)}}} of finite floats"
    )


def _predictions(algorithm, x, classes: int, dataset_name: str):
    """(logits, finding): shape, device and repeatability of ``predict`` in eval mode."""
    where = _where(type(algorithm), "predict")
    expected = [len(x), classes]
    algorithm.eval()
    try:
        with torch.no_grad():
            first = algorithm.predict(x)
            second = algorithm.predict(x)
    except Exception as error:
        return None, _finding("predict", False, f"predict(x) raised:\n{_trace(error)}")
    if not isinstance(first, torch.Tensor) or list(first.shape) != expected:
        got = list(first.shape) if isinstance(first, torch.Tensor) else type(first).__name__
        return None, _finding(
            "predict",
            False,
            f"predict(x) of {len(x)} {dataset_name} images of shape {list(x.shape[1:])} must "
            f"give logits of shape {expected} (one row per image, one column per class); "
            f"{where} gave {got}",
        )
    if first.device != x.device:
        return None, _finding(
            "predict",
            False,
            f"predict(x) of images on {x.device} must give logits on {x.device}, the device of "
            f"the images and the model (DomainBed's accuracy compares them with labels there); "
            f"{where} gave them on {first.device}. Return the network's output without "
            "moving it.",
        )
    if not torch.allclose(first, second, **TOLERANCE):
        difference = (first - second).abs().max().item()
        return None, _finding(
            "predict",
            False,
            f"predict(x) in eval mode must give the same logits for the same images; twice in "
            f"a row they differ by up to {difference:.3g} ({where}). Evaluation draws unseeded "
            "random numbers or changes the model's state.",
        )
    return first, _finding("predict", True, f"logits {expected}, the same twice in eval mode")


def _reload(algorithm, fresh, x, logits):
    """A new instance loaded with ``algorithm``'s state dict, as a checkpoint restores it."""
    buffer = io.BytesIO()
    torch.save(algorithm.state_dict(), buffer)
    buffer.seek(0)
    try:
        fresh.load_state_dict(torch.load(buffer, weights_only=False))
    except Exception as error:
        return None, _finding(
            "state dict",
            False,
            "a new instance must load the state_dict() of a trained one (DomainBed's checkpoint"
            f" model_dict):\n{_trace(error)}",
        )
    fresh.eval()
    with torch.no_grad():
        reloaded = fresh.predict(x)
    same_kind = isinstance(reloaded, torch.Tensor) and reloaded.shape == logits.shape
    if same_kind and reloaded.device == logits.device:
        if torch.allclose(reloaded, logits, **TOLERANCE):
            same = "a reloaded instance predicts the same logits"
            return None, _finding("state dict", True, same)
        difference = f"up to {(reloaded - logits).abs().max().item():.3g}"
    else:
        difference = "in shape" if not same_kind else f"in device ({reloaded.device})"
    return None, _finding(
        "state dict",
        False,
        "a new instance loaded with the state_dict() of a trained one must predict the same "
        f"logits; they differ {difference} ({_where(type(fresh), 'predict')}). Something "
        "predict uses is not in state_dict(): a plain tensor or number attribute set in "
        "update, instead of a registered buffer (self.register_buffer) or parameter.",
    )


def _device_move(algorithm):
    """After ``.to("meta")``, every tensor the modules hold is on the meta device: parameters,
    buffers and any plain tensor attribute (which ``.to`` would leave behind). A move to the meta
    device needs no GPU and runs the same ``Module._apply`` as a move to one."""
    try:
        algorithm.to("meta")
    except Exception as error:
        return None, _finding("to(device)", False, f".to(device) raised:\n{_trace(error)}")
    left = []
    for module_name, module in algorithm.named_modules():
        for attribute, value in vars(module).items():
            if attribute in ("_parameters", "_buffers", "_modules"):
                continue
            values = value.values() if isinstance(value, dict) else value
            tensors = values if isinstance(values, (list, tuple)) else [value]
            # Parameters held in a list are the module's own (moved in place on a real device)
            tensors = [
                t
                for t in tensors
                if isinstance(t, torch.Tensor) and not isinstance(t, torch.nn.Parameter)
            ]
            if any(t.device.type != "meta" for t in tensors):
                left.append(f"{module_name}.{attribute}".lstrip("."))
        for kind, tensors in (("parameter", module._parameters), ("buffer", module._buffers)):
            left += [
                f"{kind} {module_name}.{key}".replace(" .", " ")
                for key, tensor in tensors.items()
                if tensor is not None and tensor.device.type != "meta"
            ]
    if left:
        return None, _finding(
            "to(device)",
            False,
            f"after .to(device) these tensors of {type(algorithm).__name__} stayed on the CPU: "
            f"{', '.join(left)}. DomainBed moves the algorithm with .to(device): register each "
            "tensor as a buffer (self.register_buffer(name, tensor)) or a parameter, so that "
            ".to(device), state_dict() and checkpoints carry it.",
        )
    return None, _finding("to(device)", True, "every parameter, buffer and tensor moves")


def render(name: str, dataset: str, findings: list[Finding]) -> str:
    """The findings as lines ``ok|FAIL|skip  check  detail``, details of failures indented
    below, then the verdict: the checks that failed and those not run."""
    lines = [f"check-algorithm {name} on {dataset}"]
    for finding in findings:
        first, *rest = finding.detail.splitlines() or [""]
        lines.append(f"  {finding.status:4}  {finding.check:15} {first}")
        lines += [f"        {line}" for line in rest]
    failed = [f.check for f in findings if f.status == FAIL]
    skipped = [f.check for f in findings if f.status == SKIP]
    verdict = f"FAILED ({', '.join(failed)})" if failed else "passed"
    not_run = f"; not run: {', '.join(skipped)}" if skipped else ""
    lines.append(f"  {name}: {verdict}{not_run}")
    if dataset == "Debug28":
        lines.append(
            "  (Debug224 not built: it loads DomainBed's pretrained ResNet-50; "
            "--dataset Debug224 where those weights are cached)"
        )
    return "\n".join(lines)
