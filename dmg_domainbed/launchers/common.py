"""What the launchers share: the :class:`Launcher` contract, settings read from environment
variables, job folders, the sweep folder's lock and the report of failed jobs.

DomainBed calls a launcher as ``launcher(commands)`` with nothing else, so its settings travel
through environment variables, declared as :class:`Option` s in its ``options``;
``dmg-domainbed sweep`` validates a sweep file's ``[launcher]`` table with the same
declarations and turns it into variables. Called so, a launcher holds the folder lock of the
sweep its commands write into (:func:`sweep_folders_locked`), as ``dmg-domainbed sweep`` does.
Stdlib only at import: launchers run inside DomainBed's sweep script and on cluster nodes.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmg_domainbed.errors import UserError
from dmg_domainbed.rules import Rule, not_blank


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
    """A DomainBed command launcher and what the sweep runner asks it about its own jobs.

    DomainBed's ``command_launchers.REGISTRY`` holds callables and calls ``launcher(commands)``
    (shell strings), returning once the launcher is done with them; a registry entry may be an
    instance of a subclass (this package's launchers) or a plain function, which
    :func:`as_launcher` gives the defaults below. A subclass overrides what it knows:

    * :meth:`launch`: run the commands with a given environment (the launcher's settings and
      its jobs' variables), which the sweep runner passes; DomainBed's call passes this
      process's environment;
    * ``options``: its settings (the sweep file's ``[launcher]`` table, environment variables);
    * :meth:`check`: a :class:`~dmg_domainbed.errors.UserError` before any job folder exists;
    * :meth:`running_jobs`: which incomplete job folders still have a job queued or running.
    """

    name = "launcher"
    options: tuple[Option, ...] = ()

    def __call__(self, commands: list[str]) -> None:
        """DomainBed's call: :meth:`launch` with this process's environment, while holding the
        folder lock of every sweep folder the commands write into (:func:`sweep_folders_locked`),
        so that no other command deletes or launches jobs there meanwhile."""
        with sweep_folders_locked(commands):
            self.launch(commands, os.environ)

    def launch(self, commands: list[str], environ: Mapping[str, str]) -> None:
        """Run ``commands`` with ``environ`` as the environment of the launcher and its jobs;
        return when the launcher is done with them."""
        raise NotImplementedError

    def check(self, environ: Mapping[str, str]) -> str | None:
        """Validate the settings in ``environ`` before any job exists (``UserError`` if they
        are wrong); one line on how the jobs will run, or None."""
        return None

    def running_jobs(self, output_dirs: Sequence[Path], environ: Mapping[str, str]) -> dict:
        """Folder -> state of each of ``output_dirs`` whose job is still queued or running;
        empty for a launcher whose jobs end with the command that started them."""
        return {}


class FunctionLauncher(Launcher):
    """A plain ``launcher(commands)`` function (DomainBed's own launchers, another package's):
    no settings, no check, no job outliving its command. It starts its jobs with this
    process's environment, so what ``environ`` sets differently is put on each command line
    (``env NAME=VALUE ... COMMAND``)."""

    def __init__(self, function: Callable[[list[str]], None]) -> None:
        self.function = function
        self.name = getattr(function, "__name__", repr(function))

    def launch(self, commands: list[str], environ: Mapping[str, str]) -> None:
        changed = environment_changes(environ)
        prefix = shlex.join(["env", *(f"{k}={v}" for k, v in changed.items())]) + " "
        self.function([prefix + command for command in commands] if changed else commands)


def not_launched(error: object, commands: Iterable[str], then: str = "") -> UserError:
    """``error`` (and ``then``) as a :class:`UserError`, once each command's ``--output_dir``
    that is an empty folder is removed (DomainBed's sweep makes them before it calls the
    launcher, and takes a folder that exists for a job launched before): so the same sweep
    command launches those jobs once the cause is fixed."""
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
    """Inside, this process holds the folder lock (:class:`dmg_domainbed.locks.FolderLock`) of
    the folder that holds each command's ``--output_dir`` (its sweep's folder). When another
    live command holds one, a :class:`~dmg_domainbed.errors.UserError` naming it, and the empty
    job folders made for ``commands`` are removed: nothing is launched."""
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
    """Why a failed job may have failed: its ``--output_dir`` no longer exists (the launchers
    make it before a job starts), so it was deleted while the job ran. None otherwise."""
    output_dir = output_dir_of(command)
    if output_dir is None or os.path.lexists(output_dir):
        return None
    return (
        f"its folder {output_dir} no longer exists: it was deleted while the job ran, e.g. by "
        "DomainBed's `sweep delete_incomplete`, which deletes the folder of every job without "
        "a 'done' file, running ones included, and which no lock stops. Launch the sweep again "
        "once nothing else works in its folder"
    )


def environment_changes(
    environ: Mapping[str, str], base: Mapping[str, str] = os.environ
) -> dict[str, str]:
    """The variables ``environ`` sets that ``base`` lacks or sets otherwise."""
    return {name: value for name, value in environ.items() if base.get(name) != value}


def as_launcher(entry: Callable[[list[str]], None]) -> Launcher:
    """A registry entry as a :class:`Launcher`: itself if it is one."""
    return entry if isinstance(entry, Launcher) else FunctionLauncher(entry)


@dataclass(frozen=True)
class Failure:
    """A failed job as a failure report shows it: why it ended (``exit 3``, a Slurm state, an
    exception), its command, what to lower if it ran out of memory, its log and the end of its
    output; ``job`` names it where the launcher has a name for it (a Slurm job id)."""

    reason: str
    command: str
    job: str = ""
    hint: str | None = None
    log: Path | None = None
    tail: tuple[str, ...] = ()


def failure_report(failures: Sequence[Failure], total: int, detailed: int = 10) -> str | None:
    """The report of ``failures`` among ``total`` jobs, or None if none failed: each of the
    first ``detailed`` with its command, hint, log and output tail, the rest counted by
    reason."""
    if not failures:
        return None
    lines = [f"{len(failures)} of {total} job(s) failed:"]
    for failure in failures[:detailed]:
        named = f"{failure.job}: " if failure.job else ""
        lines += [f"  {named}{failure.reason}", f"    {failure.command}"]
        lines += [f"    {failure.hint}"] * bool(failure.hint)
        lines += [f"    log: {failure.log}"] * bool(failure.log)
        lines += ["    its output ends with:"] * bool(failure.tail)
        lines += [f"      {line}" for line in failure.tail]
    rest = Counter(failure.reason for failure in failures[detailed:])
    lines += [f"  and {n} more: {reason}" for reason, n in rest.most_common()]
    return "\n".join(lines)
