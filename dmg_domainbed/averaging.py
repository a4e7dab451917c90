"""Weight averaging for DomainBed runs, chosen by the hparam ``averaging`` (docs/algorithms.md,
"Weight averaging"): ``"none"`` (the default, which touches nothing), ``"sma"`` or ``"ema"``,
declared in :mod:`dmg_domainbed.hparams.every_algorithm` outside DomainBed's registry and
applied to every algorithm DomainBed builds (:mod:`dmg_domainbed.integration`).

From step ``s`` = ``averaging_start`` (train.py's steps, from 0), after every ``update``, with
``w_t`` the weights after step ``t``:

* ``"sma"`` (EoA, Arpit et al. 2022; SWAD's uniform average, Cha et al. 2021, over every step):
  ``w_avg = 1/(t - s + 1) * sum_{k=s..t} w_k``, kept as ``w_avg += (w_t - w_avg) / n``;
* ``"ema"``: ``w_avg = decay * w_avg + (1 - decay) * w_t`` (``averaging_decay``), from ``w_s``.

In eval mode the averaged tensors take the trained ones' place (train.py evaluates them, and
``state_dict()`` saves them); in train mode the trained ones return, so ``update`` trains the
same weights as without averaging. Every floating-point ``state_dict`` entry is averaged
(BatchNorm's statistics too, as EoA does); an update that changes the state's names or shapes
starts the average again; ``load_state_dict`` drops it. ``init_seed`` >= 0
(:func:`seed_initialisation`) builds the networks from one seed, so that runs can be averaged
together (``dmg-domainbed soup``: DiWA, Rame et al. 2022).
"""

from __future__ import annotations

import functools
import json
import types
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from dmg_domainbed.errors import UserError
from dmg_domainbed.hparams.every_algorithm import (
    AVERAGING,
    AVERAGING_DECAY,
    AVERAGING_START,
    EMA,
    INIT_SEED,
    NO_AVERAGING,
    OWN_SEED,
    SMA,
)
from dmg_domainbed.hparams.every_algorithm import EVERY_ALGORITHM as HPARAMS

#: The averaging modes that read each hparam besides ``averaging``.
READ_BY = {AVERAGING_START: (SMA, EMA), AVERAGING_DECAY: (EMA,)}
#: Where an averaged algorithm keeps its :class:`Average`, among its instance attributes.
STATE = "_weight_average"


def check(hparams: Mapping[str, Any], owner: str) -> str:
    """The averaging mode ``hparams`` ask for; :class:`UserError` for a value :data:`HPARAMS`
    refuses, or for ``averaging_start`` or ``averaging_decay`` given to a mode that does not
    read them (a value that would change nothing)."""
    for name in (AVERAGING, *READ_BY):
        if name in hparams:
            HPARAMS[name].check(hparams[name], owner)
    mode = hparams.get(AVERAGING, HPARAMS[AVERAGING].default)
    for name, modes in READ_BY.items():
        if name in hparams and mode not in modes:
            readers = " or ".join(repr(m) for m in modes)
            example = json.dumps({AVERAGING: modes[-1], name: hparams[name]})
            raise UserError(
                f"{owner} hparam '{name}' = {hparams[name]!r} is read only with '{AVERAGING}' "
                f"{readers}, and this run's '{AVERAGING}' is {mode!r}: it would change nothing. "
                f"Remove it, or give e.g. '{example}'."
            )
    return mode


def check_run_length(hparams: Mapping[str, Any], steps: int, owner: str) -> None:
    """:class:`UserError` when a run of ``steps`` steps would average nothing: its averaging
    starts at or after its last step, so it would evaluate and save the trained weights alone
    (the algorithm, which never learns the run's length, cannot tell)."""
    mode = hparams.get(AVERAGING, HPARAMS[AVERAGING].default)
    start = hparams.get(AVERAGING_START, HPARAMS[AVERAGING_START].default)
    if mode != NO_AVERAGING and start >= steps - 1:
        given = "" if AVERAGING_START in hparams else " (its default)"
        raise UserError(
            f"{owner} hparam '{AVERAGING_START}' = {start}{given} is not below the last of the "
            f"run's {steps} steps: '{AVERAGING}' {mode!r} would average at most one step's "
            f"weights, and evaluate and save the trained ones. Give '{AVERAGING_START}' below "
            f"{steps - 1} (EoA starts at 100 of 5,000 steps), e.g. "
            f"'{json.dumps({AVERAGING: mode, AVERAGING_START: steps // 50})}'."
        )


def apply(algorithm: nn.Module, hparams: Mapping[str, Any]) -> None:
    """Make ``algorithm`` evaluate and save the average ``hparams`` ask for (:func:`check`;
    ``"none"``: nothing): :data:`WRAPPERS` replace its methods on the instance, around
    :func:`dmg_domainbed.precision.apply`'s."""
    mode = check(hparams, type(algorithm).__name__)
    if mode == NO_AVERAGING:
        return
    start = hparams.get(AVERAGING_START, HPARAMS[AVERAGING_START].default)
    decay = hparams.get(AVERAGING_DECAY, HPARAMS[AVERAGING_DECAY].default)
    vars(algorithm)[STATE] = Average(mode, start, decay)
    _wrap(algorithm, WRAPPERS)


def _wrap(algorithm: nn.Module, wrappers: Mapping[str, Callable]) -> None:
    """Each method of ``wrappers`` replaced on the instance by its wrapper, given the function
    it replaces (precision's or the class's); bound, so that copy.deepcopy binds the copy's."""
    for name, wrapper in wrappers.items():
        previous = getattr(algorithm, name).__func__
        vars(algorithm)[name] = types.MethodType(functools.partial(wrapper, previous), algorithm)


def seed_initialisation(algorithm: nn.Module, hparams: Mapping[str, Any]) -> None:
    """With ``init_seed`` >= 0 in ``hparams``, seed torch with it for the networks the
    algorithm's class builds after ``Algorithm.__init__`` (when this is called), and give torch
    its random state back at the first ``to``, ``load_state_dict`` or ``update`` call, train.py's
    first after the build; without it, do nothing."""
    if INIT_SEED not in hparams:
        return
    HPARAMS[INIT_SEED].check(hparams[INIT_SEED], type(algorithm).__name__)
    if hparams[INIT_SEED] == OWN_SEED:
        return
    job_state = [torch.random.get_rng_state()]
    torch.default_generator.manual_seed(hparams[INIT_SEED])  # the CPU's: networks built there
    giving_back = functools.partial(_give_back, job_state)
    _wrap(algorithm, dict.fromkeys(("to", "load_state_dict", "update"), giving_back))


def _give_back(job_state: list, previous: Callable, algorithm: nn.Module, *args, **kwargs) -> Any:
    """``previous``, torch given the job's random state back first (once: ``job_state``)."""
    if job_state:
        torch.random.set_rng_state(job_state.pop())
    return previous(algorithm, *args, **kwargs)


def average_of(algorithm: nn.Module) -> Average | None:
    """The :class:`Average` ``algorithm`` keeps, or ``None`` when it averages nothing."""
    return vars(algorithm).get(STATE)


class Average:
    """The average of an algorithm's floating-point state over its updates.

    ``trained`` are the algorithm's tensors that are averaged, ``averaged`` their averages, in
    the same order; :meth:`show` exchanges their storage (no copy), so that the algorithm's own
    tensors hold the average while it is evaluated.
    """

    def __init__(self, mode: str, start: int, decay: float) -> None:
        self.mode, self.start, self.decay = mode, start, decay
        self.steps = 0  # updates done
        self.count = 0  # weights in the average; 0: no average yet
        self.structure: tuple | None = None  # names and shapes of the averaged state
        self.trained: list[torch.Tensor] = []
        self.averaged: list[torch.Tensor] = []
        self.showing = False  # whether the algorithm's tensors hold the average

    @torch.no_grad()
    def add(self, algorithm: nn.Module) -> None:
        """Take the weights after one update into the average."""
        step, self.steps = self.steps, self.steps + 1
        state = averaged_state(algorithm)
        shape = structure(state)
        if shape != self.structure:  # this update changed the state: start again after it
            self.structure = shape
            self.drop()
            return
        if step < self.start:
            return
        self.trained = trained = list(state.values())
        if self.count == 0:
            self.averaged = [t.detach().clone() for t in trained]
        else:
            self.averaged = [
                a.to(t.device, t.dtype) for a, t in zip(self.averaged, trained, strict=True)
            ]
            weight = 1 / (self.count + 1) if self.mode == SMA else 1 - self.decay
            torch._foreach_lerp_(self.averaged, [t.detach() for t in trained], weight)
        self.count += 1

    def drop(self) -> None:
        """Forget the average (the trained weights stand for it until the next update)."""
        self.show(False)
        self.count, self.trained, self.averaged = 0, [], []

    def show(self, averaged: bool) -> None:
        """Put the average (``averaged``) or the trained weights in the algorithm's tensors."""
        if averaged and self.count == 0:
            averaged = False
        if averaged == self.showing:
            return
        for i, tensor in enumerate(self.trained):
            tensor.data, self.averaged[i] = self.averaged[i], tensor.data
        self.showing = averaged


def averaged_state(algorithm: nn.Module) -> dict[str, torch.Tensor]:
    """The algorithm's floating-point ``state_dict`` entries (its own tensors), each tensor
    once (DomainBed's ERM holds its featurizer under two names)."""
    state = type(algorithm).state_dict(algorithm, keep_vars=True)
    first = {id(tensor): name for name, tensor in reversed(state.items())}  # each one's first name
    return {n: t for n, t in state.items() if t.is_floating_point() and first[id(t)] == n}


def structure(state: Mapping[str, torch.Tensor]) -> tuple:
    return tuple((name, tuple(tensor.shape)) for name, tensor in state.items())


# What apply puts on an averaged algorithm, each called with the method it replaces.
def _update(previous: Callable, algorithm: nn.Module, *args: Any, **kwargs: Any) -> Any:
    average = average_of(algorithm)
    average.show(False)  # the trained weights are the ones trained
    if average.structure is None:  # the state's structure before the first update
        average.structure = structure(averaged_state(algorithm))
    result = previous(algorithm, *args, **kwargs)
    average.add(algorithm)
    average.show(not algorithm.training)
    return result


def _train(previous: Callable, algorithm: nn.Module, mode: bool = True) -> nn.Module:
    result = previous(algorithm, mode)
    average_of(algorithm).show(not mode)
    return result


def _state_dict(previous: Callable, algorithm: nn.Module, *args: Any, **kwargs: Any) -> Any:
    average = average_of(algorithm)
    showing = average.showing
    average.show(True)
    try:
        return previous(algorithm, *args, **kwargs)
    finally:
        average.show(showing)


def _load_state_dict(previous: Callable, algorithm: nn.Module, *args: Any, **kwargs: Any) -> Any:
    average_of(algorithm).drop()
    return previous(algorithm, *args, **kwargs)


WRAPPERS = {
    "update": _update,
    "train": _train,
    "state_dict": _state_dict,
    "load_state_dict": _load_state_dict,
}
