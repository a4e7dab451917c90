"""What the launchers share: the :class:`Launcher` contract (docs/contributing.md), settings
as environment variables (:class:`Option`: DomainBed calls ``launcher(commands)`` with nothing
else; a sweep file's ``[launcher]`` table becomes them), job folders, the sweep folder's lock
and the report of failed jobs. Stdlib only at import: launchers run inside DomainBed's sweep
script and on cluster nodes.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmg_domainbed.errors import UserError
from dmg_domainbed.rules import Rule, not_blank

DETAILED_FAILURES = 10  # failed jobs a report shows in full
# nvidia-smi -L: a line per GPU, then one per MIG instance of it, e.g.
# "  MIG 3g.40gb     Device  0: (UUID: MIG-5f1b4a6e-...)" (drivers before 470: MIG-GPU-.../1/0).
_GPU_LINE = re.compile(r"^GPU (\d+):")
_MIG_LINE = re.compile(r"^\s+MIG\s.*Device\s+\d+:\s+\(UUID:\s*(MIG-[^)\s]+)\)")


@dataclass(frozen=True)
class Option:
    """A launcher setting: its ``[launcher]`` key, variable, kind (``int``, ``float``, ``str``
    or ``bool``) and default (``None``: the launcher decides, as ``help`` says)."""

    name: str
    env: str
    kind: type
    default: Any
    help: str
    minimum: float | None = None
    choices: tuple[str, ...] | None = None

    @property
    def rule(self) -> Rule:
        text = not_blank if self.kind is str else None
        return Rule((self.kind,), minimum=self.minimum, choices=self.choices, validate=text)

    @property
    def fix(self) -> str:
        return f"Fix the value or unset it to use the default ({self.name}: {self.help})."

    def check(self, value: Any, given_as: str) -> Any:
        """``value`` as a valid setting; :class:`UserError` if it is not."""
        return self.rule.check(value, given_as, self.fix)

    def read(self, environ: Mapping[str, str]) -> Any:
        """Its variable's value when set and not blank, else its default."""
        text = environ.get(self.env, "")
        return self.rule.parse(text, self.env, self.fix) if text.strip() else self.default


def read_options(options: Iterable[Option], environ: Mapping[str, str]) -> dict[str, Any]:
    return {option.name: option.read(environ) for option in options}


def visible_gpus(environ: Mapping[str, str] = os.environ) -> list[str]:
    """GPU ids jobs may use: ``CUDA_VISIBLE_DEVICES`` when set, else :func:`listed_devices`."""
    if "CUDA_VISIBLE_DEVICES" in environ:
        return [g.strip() for g in environ["CUDA_VISIBLE_DEVICES"].split(",") if g.strip()]
    try:
        listing = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return listed_devices(listing)


def listed_devices(listing: str) -> list[str]:
    """The CUDA devices in ``nvidia-smi -L``'s ``listing`` as ``CUDA_VISIBLE_DEVICES`` names
    them: a GPU's index, or each MIG instance's UUID (a CUDA process uses one instance)."""
    gpus: list[list[str]] = []  # each GPU's index, then its MIG instances
    for line in listing.splitlines():
        if found := _GPU_LINE.match(line):
            gpus.append([found.group(1)])
        elif (found := _MIG_LINE.match(line)) and gpus:
            gpus[-1].append(found.group(1))
    return [device for gpu, *migs in gpus for device in migs or [gpu]]


def signal_group(leader_pid: int, signal_number: int = signal.SIGKILL) -> None:
    """``signal_number`` to the process group that ``leader_pid`` leads, if it still exists."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader_pid, signal_number)


def output_dir_of(command: str) -> str | None:
    """The ``--output_dir`` a DomainBed train command names, or ``None``."""
    with contextlib.suppress(ValueError):
        words = shlex.split(command)
        for word, following in zip(words, [*words[1:], None]):
            if word.startswith("--output_dir="):
                return word.split("=", 1)[1]
            if word == "--output_dir" and following is not None:
                return following
    return None


class Launcher:
    """A DomainBed command launcher (``launcher(commands)``) and what the sweep runner asks it
    about its own jobs; a subclass overrides what it knows (docs/contributing.md)."""

    name = "launcher"
    options: tuple[Option, ...] = ()

    def __call__(self, commands: list[str]) -> None:
        """DomainBed's call: :meth:`launch` with this process's environment, holding the lock
        of each sweep folder the commands write into."""
        with sweep_folders_locked(commands):
            self.launch(commands, os.environ)

    def launch(self, commands: list[str], environ: Mapping[str, str]) -> None:
        """Run ``commands`` with ``environ`` as the launcher's and its jobs' environment."""
        raise NotImplementedError

    def check(self, environ: Mapping[str, str]) -> str | None:
        """``UserError`` if the settings in ``environ`` are wrong, before any job exists; else
        one line on how the jobs will run, or None."""
        return None

    def running_jobs(self, output_dirs: Sequence[Path], environ: Mapping[str, str]) -> dict:
        """Folder -> state of each of ``output_dirs`` whose job is still queued or running."""
        return {}


class FunctionLauncher(Launcher):
    """A plain ``launcher(commands)`` function: what ``environ`` sets otherwise than this
    process's environment goes on each command line (``env NAME=VALUE ... COMMAND``)."""

    def __init__(self, function: Callable[[list[str]], None]) -> None:
        self.function = function
        self.name = getattr(function, "__name__", repr(function))

    def launch(self, commands: list[str], environ: Mapping[str, str]) -> None:
        changed = environment_changes(environ)
        prefix = shlex.join(["env", *(f"{k}={v}" for k, v in changed.items())]) + " "
        self.function([prefix + command for command in commands] if changed else commands)


def not_launched(error: object, commands: Iterable[str], then: str = "") -> UserError:
    """``error`` (and ``then``) as a :class:`UserError`, once each command's ``--output_dir``
    that is an empty folder is removed: DomainBed's sweep, which made them, takes a folder that
    exists for a launched job, so the same sweep command launches them once the cause is fixed."""
    removed = 0
    for output_dir in filter(None, map(output_dir_of, commands)):
        with contextlib.suppress(OSError):
            os.rmdir(output_dir)  # only ever removes an empty folder
            removed += 1
    return UserError(
        f"{error} The {removed} empty job folder(s) made for the jobs not launched were removed: "
        f"the same sweep command launches them once the cause is fixed.{then}"
    )


@contextlib.contextmanager
def sweep_folders_locked(commands: Sequence[str]) -> Iterator[None]:
    """Inside, this process holds the :class:`~dmg_domainbed.locks.FolderLock` of the folder
    holding each command's ``--output_dir``; when another holds one, :func:`not_launched`."""
    from dmg_domainbed.locks import FolderLock  # at call time: it imports psutil, flufl.lock

    folders = {Path(d).absolute().parent for d in map(output_dir_of, commands) if d}
    with contextlib.ExitStack() as held:
        for folder in sorted(folders):
            try:
                held.enter_context(FolderLock(folder))
            except UserError as error:
                raise not_launched(
                    f"{error}\nNothing was launched.",
                    commands,
                    " DomainBed's own `sweep delete_incomplete` is not stopped by the lock (it "
                    "deletes folders before any launcher runs): never run it on a folder a sweep "
                    "is using, as it deletes the folders of running jobs.",
                ) from None
        yield


def folder_deleted(command: str) -> str | None:
    """Why a failed job may have failed: its ``--output_dir`` was deleted while it ran."""
    output_dir = output_dir_of(command)
    if output_dir is None or os.path.lexists(output_dir):
        return None
    return (
        f"its folder {output_dir} no longer exists: it was deleted while the job ran, e.g. by "
        "DomainBed's `sweep delete_incomplete`, which deletes the folder of every job without "
        "a 'done' file, running ones included, and which no lock stops. Launch the sweep again "
        "once nothing else works in its folder"
    )


def environment_changes(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables ``environ`` sets that this process's environment lacks or sets otherwise."""
    return {name: value for name, value in environ.items() if os.environ.get(name) != value}


def as_launcher(entry: Callable[[list[str]], None]) -> Launcher:
    """A registry entry as a :class:`Launcher`: itself if it is one."""
    return entry if isinstance(entry, Launcher) else FunctionLauncher(entry)


@dataclass(frozen=True)
class Failure:
    """A failed job as a failure report shows it; ``job`` names it where the launcher can (a
    Slurm job id)."""

    reason: str
    command: str
    job: str = ""
    hint: str | None = None
    log: Path | None = None
    tail: tuple[str, ...] = ()


def failure_report(failures: Sequence[Failure], total: int) -> str | None:
    """The report of ``failures`` among ``total`` jobs (None if none): the first
    :data:`DETAILED_FAILURES` in full, the rest counted by reason."""
    if not failures:
        return None
    lines = [f"{len(failures)} of {total} job(s) failed:"]
    for failure in failures[:DETAILED_FAILURES]:
        named = f"{failure.job}: " if failure.job else ""
        lines += [f"  {named}{failure.reason}", f"    {failure.command}"]
        lines += [f"    {failure.hint}"] * bool(failure.hint)
        lines += [f"    log: {failure.log}"] * bool(failure.log)
        lines += ["    its output ends with:"] * bool(failure.tail)
        lines += [f"      {line}" for line in failure.tail]
    rest = Counter(failure.reason for failure in failures[DETAILED_FAILURES:])
    lines += [f"  and {n} more: {reason}" for reason, n in rest.most_common()]
    return "\n".join(lines)
