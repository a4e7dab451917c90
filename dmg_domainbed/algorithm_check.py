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
``import``          the entry point loads (a failure shows the plugin's traceback)
``hparams``         DomainBed's registry gives its default hparams on the dataset
``random hparams``  ``random_hparams(name, dataset, seed)`` is the same twice, on every dataset
``hparam names``    no declared name silently replaces one of DomainBed's (an override is an
                    ``HParam(..., where_defined=True)``)
``build``           ``cls(input_shape, num_classes, num_domains, hparams)`` on the debug dataset,
                    built with the same hparams: the hparam names rule of every run applies
``update``          three updates, each returning ``{name: float}``
``predict``         logits of shape ``[images, classes]``, the same twice in eval mode
``state dict``      a new instance loaded with ``state_dict()`` predicts the same logits
``to(device)``      after ``.to("meta")`` no tensor of the model is left on the CPU
=================== ===========================================================================

``Debug224`` builds DomainBed's ResNet-50 from its pretrained weights; it is checked only when
asked for (``--dataset Debug224``), where those weights are cached.
"""

from __future__ import annotations

import inspect
import io
import traceback
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from dmg_domainbed.errors import UserError

DEBUG_DATASETS = ("Debug28", "Debug224")
BATCH_SIZE = 8  # images per domain, as DomainBed's test_models
DEBUG_IMAGES = 16  # per domain in DomainBed's debug datasets
UPDATES = 3  # as DomainBed's test_models
SEEDS = (0,)  # as DomainBed's test_hparams_registry
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}


@dataclass(frozen=True)
class Finding:
    """The outcome of one check: its name, whether it passed and what was seen (on failure:
    what was expected, what was found and where)."""

    check: str
    passed: bool
    detail: str


class _Stop(Exception):
    """A failed check after which the others cannot run."""


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


def _trace(error: BaseException) -> str:
    return "".join(traceback.format_exception(error)).rstrip()


def algorithm_class(name: str) -> type:
    """The class DomainBed's ``get_algorithm_class`` gives ``name``; :class:`UserError` for a
    name nothing registers (with the registered names),
    :class:`~dmg_domainbed.integration.PluginImportError` for a plugin that does not import."""
    import dmg_domainbed

    dmg_domainbed.register()
    from domainbed import algorithms

    from dmg_domainbed import integration

    declared = name in integration.entry_points(integration.ALGORITHM_GROUP)
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
    minibatches of ``images_per_domain`` images per domain."""
    from dmg_domainbed.integration import PluginImportError

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
    try:
        cls = algorithm_class(name)
    except PluginImportError as error:
        return [Finding("import", False, str(error))]
    found = [Finding("import", True, f"{cls.__module__}.{cls.__qualname__}")]
    found += _hparam_checks(name, dataset)
    if any(f.check == "hparams" and not f.passed for f in found):
        return found  # the model cannot be built without its hparams
    try:
        _model_checks(cls, name, dataset, images_per_domain, found)
    except _Stop:
        pass
    return found


def _hparam_checks(name: str, dataset: str) -> list[Finding]:
    from domainbed import datasets, hparams_registry

    try:
        hparams_registry.default_hparams(name, dataset)
    except Exception as error:
        return [
            Finding(
                "hparams",
                False,
                f"hparams_registry.default_hparams({name!r}, {dataset!r}) raised:\n{_trace(error)}",
            )
        ]
    found = [Finding("hparams", True, f"default hparams on {dataset}")]
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
            + "\n  ".join(differing[:10])
            + "\nA sampler must draw only from the numpy RandomState it is given."
        )
        found.append(Finding("random hparams", False, detail))
    else:
        found.append(
            Finding("random hparams", True, f"same per seed on {len(datasets.DATASETS)} datasets")
        )
    found.append(_shadowing(name))
    return found


def _shadowing(name: str) -> Finding:
    """Declared hparams whose names DomainBed's registry already gives ``name``: the plugin's
    value silently replaces DomainBed's unless the declaration says it is an override."""
    from domainbed import datasets

    from dmg_domainbed import integration

    if name not in integration.entry_points(integration.ALGORITHM_GROUP):
        return Finding("hparam names", True, "DomainBed's own algorithm: DomainBed's names")
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
        return Finding("hparam names", True, "none replaces one of DomainBed's")
    listed = "; ".join(f"{key!r} (on {', '.join(on)})" for key, on in shadowed.items())
    return Finding(
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


def _model_checks(
    cls: type, name: str, dataset_name: str, images: int, found: list[Finding]
) -> None:
    from domainbed import datasets, hparams_registry

    hparams = hparams_registry.default_hparams(name, dataset_name)
    dataset = datasets.get_dataset_class(dataset_name)("", [], hparams)
    shape, classes, domains = dataset.input_shape, dataset.num_classes, len(dataset)
    call = f"{name}({tuple(shape)}, {classes}, {domains}, hparams)"

    def build(seed: int):
        torch.manual_seed(seed)
        try:
            return cls(shape, classes, domains, hparams)
        except Exception as error:
            found.append(
                Finding(
                    "build",
                    False,
                    f"{call} with {dataset_name}'s default hparams raised:\n{_trace(error)}",
                )
            )
            raise _Stop from None

    algorithm = build(0)
    found.append(Finding("build", True, call))
    minibatches = _minibatches(dataset, images)
    found.append(_updates(algorithm, minibatches))
    x = minibatches[0][0]
    algorithm.eval()
    logits, finding = _predictions(algorithm, x, classes, dataset_name)
    found.append(finding)
    if logits is None:
        return
    found.append(_reload(algorithm, build(1), x, logits))
    found.append(_device_move(build(2)))


def _updates(algorithm, minibatches) -> Finding:
    cls = type(algorithm)
    where = _where(cls, "update")
    for step in range(UPDATES):
        try:
            result = algorithm.update(minibatches)
        except Exception as error:
            return Finding("update", False, f"update {step + 1} raised:\n{_trace(error)}")
        expected = (
            "update(minibatches) must return a dict {name: float}: DomainBed's train averages "
            "each value and writes it to results.jsonl"
        )
        if not isinstance(result, Mapping):
            return Finding("update", False, f"{expected}; {where} returned {type(result).__name__}")
        for key, value in result.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                kind = f"{type(value).__module__}.{type(value).__qualname__}"
                return Finding(
                    "update",
                    False,
                    f"{expected}; {where} returned {key!r}: {kind}. Return a Python number "
                    "(e.g. loss.item() for a tensor).",
                )
    return Finding("update", True, f"{UPDATES} updates, each {{{', '.join(result)}}} of floats")


def _predictions(algorithm, x, classes: int, dataset_name: str):
    """(logits, finding): shape and repeatability of ``predict`` in eval mode."""
    where = _where(type(algorithm), "predict")
    expected = [len(x), classes]
    try:
        with torch.no_grad():
            first = algorithm.predict(x)
            second = algorithm.predict(x)
    except Exception as error:
        return None, Finding("predict", False, f"predict(x) raised:\n{_trace(error)}")
    if not isinstance(first, torch.Tensor) or list(first.shape) != expected:
        got = list(first.shape) if isinstance(first, torch.Tensor) else type(first).__name__
        return None, Finding(
            "predict",
            False,
            f"predict(x) of {len(x)} {dataset_name} images of shape {list(x.shape[1:])} must "
            f"give logits of shape {expected} (one row per image, one column per class); "
            f"{where} gave {got}",
        )
    if not torch.allclose(first, second, **TOLERANCE):
        difference = (first - second).abs().max().item()
        return None, Finding(
            "predict",
            False,
            f"predict(x) in eval mode must give the same logits for the same images; twice in "
            f"a row they differ by up to {difference:.3g} ({where}). Evaluation draws unseeded "
            "random numbers or changes the model's state.",
        )
    return first, Finding("predict", True, f"logits {expected}, the same twice in eval mode")


def _reload(algorithm, fresh, x, logits) -> Finding:
    """A new instance loaded with ``algorithm``'s state dict, as a checkpoint restores it."""
    buffer = io.BytesIO()
    torch.save(algorithm.state_dict(), buffer)
    buffer.seek(0)
    try:
        fresh.load_state_dict(torch.load(buffer, weights_only=False))
    except Exception as error:
        return Finding(
            "state dict",
            False,
            "a new instance must load the state_dict() of a trained one (DomainBed's checkpoint"
            f" model_dict):\n{_trace(error)}",
        )
    fresh.eval()
    with torch.no_grad():
        reloaded = fresh.predict(x)
    if isinstance(reloaded, torch.Tensor) and reloaded.shape == logits.shape:
        if torch.allclose(reloaded, logits, **TOLERANCE):
            return Finding("state dict", True, "a reloaded instance predicts the same logits")
        difference = f"up to {(reloaded - logits).abs().max().item():.3g}"
    else:
        difference = "in shape"
    return Finding(
        "state dict",
        False,
        "a new instance loaded with the state_dict() of a trained one must predict the same "
        f"logits; they differ {difference} ({_where(type(fresh), 'predict')}). Something "
        "predict uses is not in state_dict(): a plain tensor or number attribute set in "
        "update, instead of a registered buffer (self.register_buffer) or parameter.",
    )


def _device_move(algorithm) -> Finding:
    """After ``.to("meta")``, every tensor the modules hold is on the meta device: parameters,
    buffers and any plain tensor attribute (which ``.to`` would leave behind). A move to the meta
    device needs no GPU and runs the same ``Module._apply`` as a move to one."""
    try:
        algorithm.to("meta")
    except Exception as error:
        return Finding("to(device)", False, f".to(device) raised:\n{_trace(error)}")
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
        return Finding(
            "to(device)",
            False,
            f"after .to(device) these tensors of {type(algorithm).__name__} stayed on the CPU: "
            f"{', '.join(left)}. DomainBed moves the algorithm with .to(device): register each "
            "tensor as a buffer (self.register_buffer(name, tensor)) or a parameter, so that "
            ".to(device), state_dict() and checkpoints carry it.",
        )
    return Finding("to(device)", True, "every parameter, buffer and tensor moves")


def render(name: str, dataset: str, findings: list[Finding]) -> str:
    """The findings as lines ``ok|FAIL  check  detail``, details of failures indented below."""
    lines = [f"check-algorithm {name} on {dataset}"]
    for finding in findings:
        first, *rest = finding.detail.splitlines() or [""]
        lines.append(f"  {'ok' if finding.passed else 'FAIL':4}  {finding.check:15} {first}")
        lines += [f"        {line}" for line in rest]
    failed = [f.check for f in findings if not f.passed]
    lines.append(f"  {name}: " + (f"FAILED ({', '.join(failed)})" if failed else "passed"))
    if dataset == "Debug28":
        lines.append(
            "  (Debug224 not built: it loads DomainBed's pretrained ResNet-50; "
            "--dataset Debug224 where those weights are cached)"
        )
    return "\n".join(lines)
