"""The package's one error type for mistakes a user can fix.

Every check of user input (a name, an hparam value, a folder, a sweep file, a launcher
setting, the machine's set-up) raises :class:`UserError` with a message that says what was
given, what is allowed and how to fix it. The ``dmg-domainbed`` commands print that message
without a traceback and exit with status 2; any other exception is a bug of the package and
keeps its traceback.

Stdlib only: launchers and the start-up hook import it.
"""


class UserError(ValueError):
    """Input the package cannot use; the message says what was given, what is allowed and how
    to fix it."""
