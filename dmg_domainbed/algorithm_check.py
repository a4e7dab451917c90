"""``check-algorithm``: what DomainBed's ``test_models`` and ``test_hparams_registry`` ask of an
algorithm, and what its ``train`` needs beyond them (``update`` returns finite numbers it can
average, ``state_dict()`` restores the model, ``.to(device)`` moves all of it), run on any
registered algorithm: DomainBed's, this package's or another package's. The checks are
:data:`CHECKS`, run in order, each function saying what it asks; a failure says what was
expected, what was found and where, and a check whose need did not pass is listed as not run,
with the reason. ``Debug224`` builds DomainBed's pretrained ResNet-50: only when asked for.
"""

from __future__ import annotations

import inspect
import io
import math
import re
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace

import torch
from torch.utils.data import default_collate

from dmg_domainbed.errors import UserError
from dmg_domainbed.rules import with_article
from dmg_domainbed.shortlist import shortlist

BATCH_SIZE = 8  # images per domain, as DomainBed's test_models
DEBUG_IMAGES = 16  # per domain in DomainBed's debug datasets
UPDATES = 3  # as DomainBed's test_models
SEED = 0  # as DomainBed's test_hparams_registry
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
OK, FAIL, SKIP = "ok", "FAIL", "skip"
#: The hparams seeds (0 keeps the defaults) and trials of DomainBed's default sweep.
SWEEP_HPARAMS_SEEDS, SWEEP_TRIALS = range(1, 20), range(3)


@dataclass(frozen=True)
class Finding:
    """One check's name, status (``ok``, ``FAIL``, or ``skip``: its need did not pass) and
    what was seen."""

    check: str
    status: str
    detail: str

    @property
    def passed(self) -> bool:
        return self.status == OK


class Failed(Exception):
    """A check's failure: what was expected, what was found and where."""


def _where(cls: type, attribute: str) -> str:
    """``module.Class.attribute (file:line)``: where ``cls`` gets ``attribute`` (a method or
    ``HPARAMS``); the class's own line where its source does not show it."""
    owner = next((k for k in getattr(cls, "__mro__", ()) if attribute in vars(k)), cls)
    place = f"{owner.__module__}.{owner.__qualname__}.{attribute}"
    try:
        lines, first = inspect.getsourcelines(owner)
    except (OSError, TypeError):
        return place
    defines = re.compile(rf"\s*(def {attribute}\b|{attribute}\s*[:=])")
    offset = next((i for i, line in enumerate(lines) if defines.match(line)), 0)
    return f"{place} ({inspect.getsourcefile(owner)}:{first + offset})"


def _trace(error: BaseException) -> str:
    return "".join(traceback.format_exception(error)).rstrip()


def algorithm_class(name: str) -> type | Exception:
    """DomainBed's class of ``name``, or the plugin's ``PluginImportError`` (loaded first: the
    registration does not report it too); :class:`UserError` for a name nothing registers."""
    import dmg_domainbed
    from dmg_domainbed import integration

    declared = name in integration.entry_points(integration.ALGORITHM_GROUP)
    try:
        if declared:
            integration.load(integration.ALGORITHM_GROUP, name, report=False)
        dmg_domainbed.register()
        from domainbed import algorithms

        if not declared and name not in algorithms.ALGORITHMS:
            raise UserError(
                f"no algorithm {name!r} is registered: DomainBed's and its plugins' are "
                f"{', '.join(algorithms.ALGORITHMS)}. A plugin's name is the one on the left of "
                'its entry-point line under [project.entry-points."domainbed.algorithms"]; is '
                "its package installed (pip install -e .) in this Python?"
            )
        return algorithms.get_algorithm_class(name)
    except integration.PluginImportError as error:
        return error


def check_algorithm(
    name: str, dataset: str = "Debug28", images_per_domain: int = BATCH_SIZE
) -> list[Finding]:
    """Every check of :data:`CHECKS` on ``name``, in order, on the debug ``dataset`` (Debug28 or
    Debug224: the command line's choices)."""
    if not 1 <= images_per_domain <= DEBUG_IMAGES:
        raise UserError(
            f"--images_per_domain {images_per_domain}: DomainBed's debug datasets hold "
            f"{DEBUG_IMAGES} images per domain; give 1 to {DEBUG_IMAGES} (default {BATCH_SIZE}, "
            "as DomainBed's test_models)"
        )
    loaded = algorithm_class(name)  # a name nothing registers is refused before any check
    run = SimpleNamespace(name=name, dataset=dataset, images=images_per_domain, loaded=loaded)
    found: dict[str, Finding] = {}
    stopped_by: dict[str, str] = {}  # a check not run -> the failed check that stopped it
    for check, body, need, why in CHECKS:
        if need is not None and not found[need].passed:
            cause = stopped_by[check] = stopped_by.get(need, need)
            which = "which failed" if cause == need else f"which was not run ({cause} failed)"
            found[check] = Finding(check, SKIP, f"not run: {why or f'it needs {need}'}, {which}")
            continue
        try:
            found[check] = Finding(check, OK, body(run))
        except Failed as failure:
            found[check] = Finding(check, FAIL, str(failure))
        except Exception as error:  # a check the plugin broke in a way not foreseen
            found[check] = Finding(check, FAIL, f"the check raised:\n{_trace(error)}")
    return list(found.values())


def _import(run) -> str:
    """The entry point loads (else its traceback) and names a DomainBed ``Algorithm``:
    ``run.cls``, and ``run.declared`` where a plugin declares it (``None`` for DomainBed's)."""
    from domainbed.algorithms import Algorithm

    from dmg_domainbed import integration

    cls, plugins = run.loaded, integration.entry_points(integration.ALGORITHM_GROUP)
    if isinstance(cls, integration.PluginImportError):
        raise Failed(str(cls))
    if isinstance(cls, type) and issubclass(cls, Algorithm):
        run.cls, run.declared = cls, cls if run.name in plugins else None
        return f"{cls.__module__}.{cls.__qualname__}"
    entry_point = plugins[run.name]
    kind = "a class" if isinstance(cls, type) else with_article(type(cls).__name__)
    raise Failed(
        f"'{run.name} = {entry_point.value}' names {kind}, not a subclass of DomainBed's "
        "domainbed.algorithms.Algorithm: DomainBed's train builds the algorithm as "
        f"{run.name}(input_shape, num_classes, num_domains, hparams) and calls its update and "
        "predict. Point the entry point at the algorithm's class."
    )


def _default_hparams(run) -> str:
    """DomainBed's registry gives the default hparams (a malformed HPARAMS: file and line)."""
    from domainbed import hparams_registry

    from dmg_domainbed.hparams.space import MalformedHParams

    try:
        hparams_registry.default_hparams(run.name, run.dataset)
    except MalformedHParams as error:
        raise Failed(f"{_where(run.declared, 'HPARAMS')}: {error}") from None
    except Exception as error:
        call = f"hparams_registry.default_hparams({run.name!r}, {run.dataset!r})"
        raise Failed(f"{call} raised:\n{_trace(error)}") from None
    return f"default hparams on {run.dataset}"


def _random_hparams(run) -> str:
    """Random hparams are the same per seed on every dataset, and each declared sampler draws
    values its declaration allows (:func:`_draws`)."""
    from domainbed import datasets, hparams_registry

    differing = []
    for each in datasets.DATASETS:
        first, second = (hparams_registry.random_hparams(run.name, each, SEED) for _ in range(2))
        differing += [
            f"{key!r} on {each}, seed {SEED}: {value!r} then {second.get(key)!r}"
            for key, value in first.items()
            if value != second.get(key)
        ]
    if differing:
        raise Failed(
            "random_hparams(name, dataset, seed) must give the same values for the same seed "
            "(DomainBed's test_hparams_registry; a sweep's jobs rely on it), but gave:\n  "
            + shortlist(differing, 10, "\n  ", "\n  and ")
            + "\nA sampler must draw only from the numpy RandomState it is given."
        )
    same = f"same per seed on {len(datasets.DATASETS)} datasets"
    if drawn := _draws(run.declared):
        jobs = len(SWEEP_HPARAMS_SEEDS) * len(SWEEP_TRIALS)
        same += f"; the {drawn} declared keep their rules in the {jobs} jobs of a default sweep"
    return same


def _draws(component) -> int:
    """How many hparams ``component`` declares; :class:`Failed` where, for a job of DomainBed's
    default sweep (hparams seed ``h``, trial ``t``: ``RandomState(seed_hash(seed_hash(h, t),
    name))``), a sampler draws what its declaration or the trainable bounds refuse."""
    from domainbed.lib import misc

    from dmg_domainbed.hparams.space import declared, resolve_space
    from dmg_domainbed.hparams.trainable import TRAINABLE

    hparams = declared(getattr(component, "HPARAMS", None) or ())
    seeds = [(h, t) for h in SWEEP_HPARAMS_SEEDS for t in SWEEP_TRIALS]
    names = [hparam.name for hparam in hparams]  # where_defined ones drawn too
    jobs = [
        resolve_space(hparams, misc.seed_hash(h, t), misc.seed_hash, None, names) for h, t in seeds
    ]
    lines = []
    for hparam in hparams:
        key = hparam.name
        keeps = [hparam.rule, TRAINABLE[key]] if key in TRAINABLE else [hparam.rule]
        refused = []
        for (h, t), drawn in zip(seeds, jobs):
            value = drawn[key][1]
            problem = next((p for rule in keeps if (p := rule.problem(value)) is not None), None)
            if problem is not None:
                refused.append((h, t, value, problem))
        if refused:
            h, t, value, problem = refused[0]
            lines.append(
                f"{key!r}: {len(refused)} of {len(seeds)} draws are refused, e.g. {value!r} "
                f"(hparams seed {h}, trial {t}): {problem}"
            )
    if lines:
        raise Failed(
            f"the samplers of {_where(component, 'HPARAMS')} draw values their declaration "
            "refuses; a random-search job that draws one stops when it starts (a "
            "PluginAlgorithm checks its hparams when built) or trains with a value outside the "
            "declared range:\n  "
            + "\n  ".join(lines)
            + f"\nDraw only allowed values (over the {len(seeds)} jobs of DomainBed's default "
            f"sweep, hparams seeds {SWEEP_HPARAMS_SEEDS.start}-{SWEEP_HPARAMS_SEEDS.stop - 1} x "
            f"trials {SWEEP_TRIALS.start}-{SWEEP_TRIALS.stop - 1}), or widen the declared range."
        )
    return len(hparams)


def _shadowing(run) -> str:
    """No declared name silently replaces one DomainBed's registry gives (unless declared an
    override)."""
    from domainbed import datasets

    from dmg_domainbed import integration
    from dmg_domainbed.hparams.space import declared

    name, component = run.name, run.declared
    if component is None:
        return "DomainBed's own algorithm: DomainBed's names"
    hparams = declared(getattr(component, "HPARAMS", None) or ())  # a mapping's: everywhere
    shadowed: dict[str, list[str]] = {}
    for each in datasets.DATASETS:
        own = integration.domainbed_hparams(name, each, 0)
        for h in hparams:
            if h.name in own and h.applies(each, own) and not h.where_defined:
                shadowed.setdefault(h.name, []).append(each)
    if not shadowed:
        return "none replaces one of DomainBed's"
    listed = "; ".join(f"{key!r} (on {', '.join(on)})" for key, on in shadowed.items())
    raise Failed(
        f"{name}.HPARAMS declares names DomainBed's registry already defines for {name}: "
        f"{listed}. Its value silently replaces DomainBed's. Rename the hparam, or, to change "
        "DomainBed's value on purpose, declare it as dmg_domainbed.hparams.HParam(name, default, "
        "sampler, where_defined=True) in an HParamSpace."
    )


def _build(run) -> str:
    """``run.algorithm`` built on the debug dataset with its default hparams (``run.build(seed)``
    builds more), and ``run.minibatches`` of ``run.images`` per environment, on the CPU."""
    from domainbed import datasets, hparams_registry

    hparams = hparams_registry.default_hparams(run.name, run.dataset)
    dataset = datasets.get_dataset_class(run.dataset)("", [], hparams)
    shape, run.classes, domains = dataset.input_shape, dataset.num_classes, len(dataset)
    call = f"{run.name}({tuple(shape)}, {run.classes}, {domains}, hparams)"

    def build(seed: int):
        torch.manual_seed(seed)
        return run.cls(shape, run.classes, domains, hparams)

    try:
        run.algorithm, run.build = build(0), build
    except Exception as error:
        raise Failed(
            f"{call} with {run.dataset}'s default hparams raised:\n{_trace(error)}"
        ) from None
    # each one's first images, stacked as DomainBed's test_models does: a loader would draw a seed
    run.minibatches = [
        tuple(default_collate([environment[i] for i in range(run.images)]))
        for environment in dataset
    ]
    return call


def _updates(run) -> str:
    """Three updates, each returning ``{name: float}`` of finite numbers."""
    where = _where(type(run.algorithm), "update")
    expected = (
        "update(minibatches) must return a dict {name: float}: DomainBed's train averages "
        "each value and writes it to results.jsonl"
    )
    for step in range(1, UPDATES + 1):
        try:
            result = run.algorithm.update(run.minibatches)
        except Exception as error:
            raise Failed(f"update {step} raised:\n{_trace(error)}") from None
        if not isinstance(result, Mapping):
            raise Failed(f"{expected}; {where} returned {type(result).__name__}")
        for key, value in result.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                kind = f"{type(value).__module__}.{type(value).__qualname__}"
                raise Failed(
                    f"{expected}; {where} returned {key!r}: {kind}. Return a Python number "
                    "(e.g. loss.item() for a tensor)."
                )
            if not math.isfinite(value):
                raise Failed(
                    f"update {step} of {UPDATES} returned {key!r}: {value} ({where}), on "
                    "DomainBed's debug data with the default hparams: the model no longer "
                    "trains (a NaN loss leaves NaN weights). Look for a division by zero, a log "
                    "of 0 or a learning rate too large."
                )
    return f"{UPDATES} updates, each {{{', '.join(result)}}} of finite floats"


def _predictions(run) -> str:
    """Shape, device and repeatability of ``predict`` in eval mode: ``run.logits``."""
    algorithm, x = run.algorithm, run.minibatches[0][0]
    where = _where(type(algorithm), "predict")
    expected = [len(x), run.classes]
    algorithm.eval()
    try:
        with torch.no_grad():
            first = algorithm.predict(x)
            second = algorithm.predict(x)
    except Exception as error:
        raise Failed(f"predict(x) raised:\n{_trace(error)}") from None
    if not isinstance(first, torch.Tensor) or list(first.shape) != expected:
        got = list(first.shape) if isinstance(first, torch.Tensor) else type(first).__name__
        raise Failed(
            f"predict(x) of {len(x)} {run.dataset} images of shape {list(x.shape[1:])} must "
            f"give logits of shape {expected} (one row per image, one column per class); "
            f"{where} gave {got}"
        )
    if first.device != x.device:
        raise Failed(
            f"predict(x) of images on {x.device} must give logits on {x.device}, the device of "
            f"the images and the model (DomainBed's accuracy compares them with labels there); "
            f"{where} gave them on {first.device}. Return the network's output without "
            "moving it."
        )
    if not torch.allclose(first, second, **TOLERANCE):
        raise Failed(
            f"predict(x) in eval mode must give the same logits for the same images; twice in "
            f"a row they differ by up to {(first - second).abs().max().item():.3g} ({where}). "
            "Evaluation draws unseeded random numbers or changes the model's state."
        )
    run.x, run.logits = x, first
    return f"logits {expected}, the same twice in eval mode"


def _reload(run) -> str:
    """A new instance loaded with the state dict, as a checkpoint restores it, predicts the same."""
    fresh, buffer = run.build(1), io.BytesIO()
    torch.save(run.algorithm.state_dict(), buffer)
    buffer.seek(0)
    try:
        fresh.load_state_dict(torch.load(buffer, weights_only=False))
    except Exception as error:
        raise Failed(
            "a new instance must load the state_dict() of a trained one (DomainBed's checkpoint"
            f" model_dict):\n{_trace(error)}"
        ) from None
    fresh.eval()
    with torch.no_grad():
        reloaded = fresh.predict(run.x)
    logits = run.logits
    same_kind = isinstance(reloaded, torch.Tensor) and reloaded.shape == logits.shape
    if same_kind and reloaded.device == logits.device:
        if torch.allclose(reloaded, logits, **TOLERANCE):
            return "a reloaded instance predicts the same logits"
        difference = f"up to {(reloaded - logits).abs().max().item():.3g}"
    else:
        difference = "in shape" if not same_kind else f"in device ({reloaded.device})"
    raise Failed(
        "a new instance loaded with the state_dict() of a trained one must predict the same "
        f"logits; they differ {difference} ({_where(type(fresh), 'predict')}). Something "
        "predict uses is not in state_dict(): a plain tensor or number attribute set in "
        "update, instead of a registered buffer (self.register_buffer) or parameter."
    )


def _device_move(run) -> str:
    """After ``.to("meta")`` (no GPU needed; the same ``Module._apply``), no parameter, buffer or
    plain tensor attribute is left behind."""
    algorithm = run.build(2)
    try:
        algorithm.to("meta")
    except Exception as error:
        raise Failed(f".to(device) raised:\n{_trace(error)}") from None

    def stayed(t) -> bool:
        return isinstance(t, torch.Tensor) and t.device.type != "meta"

    left = [f"parameter {n}" for n, t in algorithm.named_parameters() if stayed(t)]
    left += [f"buffer {n}" for n, t in algorithm.named_buffers() if stayed(t)]
    for module_name, module in algorithm.named_modules():
        for attribute, value in vars(module).items():
            # Parameters held in a list are the module's own (moved in place on a real device)
            values = value if isinstance(value, (list, tuple)) else [value]
            plain = [t for t in values if not isinstance(t, torch.nn.Parameter)]
            if attribute not in ("_parameters", "_buffers", "_modules") and any(map(stayed, plain)):
                left.append(f"{module_name}.{attribute}".lstrip("."))
    if left:
        raise Failed(
            f"after .to(device) these tensors of {type(algorithm).__name__} stayed on the CPU: "
            f"{', '.join(left)}. DomainBed moves the algorithm with .to(device): register each "
            "tensor as a buffer (self.register_buffer(name, tensor)) or a parameter, so that "
            ".to(device), state_dict() and checkpoints carry it."
        )
    return "every parameter, buffer and tensor moves"


_COMPARES = "it compares a reloaded instance's predictions with predict's"
#: Each check in order: name, body (reads and adds to the run's state; returns what passed or
#: raises :class:`Failed`), the check it needs to have passed, and why where that is not plain.
CHECKS = (
    ("import", _import, None, None),
    ("hparams", _default_hparams, "import", None),
    ("random hparams", _random_hparams, "hparams", None),
    ("hparam names", _shadowing, "hparams", None),
    ("build", _build, "hparams", None),
    ("update", _updates, "build", None),
    ("predict", _predictions, "build", None),
    ("state dict", _reload, "predict", _COMPARES),
    ("to(device)", _device_move, "build", None),
)


def render(name: str, dataset: str, findings: list[Finding]) -> str:
    """``ok|FAIL|skip  check  detail`` lines (more lines indented), then the verdict."""
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
