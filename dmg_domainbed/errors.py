"""The package's one error type for mistakes a user can fix.

Every check of user input (a name, an hparam value, a folder, a sweep file, a launcher
setting, the machine's set-up) raises :class:`UserError` with a message that says what was
given, what is allowed and how to fix it. The ``dmg-domainbed`` commands print that message
without a traceback and exit with status 2; so do DomainBed's scripts (``train``, ``sweep``),
with status 1. Any other exception is a bug of the package and keeps its traceback. A problem
that stops nothing (a plugin that cannot be registered) is written once to stderr by
:func:`report_once`.

Stdlib only: launchers and the start-up hook import it.
"""

import sys

#: What starts the message of a UserError that ended one of DomainBed's scripts
#: (:func:`dmg_domainbed.integration.end_scripts_with_user_message`).
SCRIPT_ERROR_PREFIX = "dmg-domainbed: error: "


class UserError(ValueError):
    """Input the package cannot use; the message says what was given, what is allowed and how
    to fix it."""


_reported: set[str] = set()


def report_once(message: str) -> None:
    """Write a problem that stops nothing to stderr, once per process, as
    ``dmg-domainbed: MESSAGE``; never raises (it runs inside the start-up hook and the
    registration of plugins, where DomainBed itself must keep working)."""
    if message in _reported:
        return
    _reported.add(message)
    try:
        sys.stderr.write(f"dmg-domainbed: {message}\n")
    except Exception:
        pass
