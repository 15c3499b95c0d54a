"""``CommandError``: the one error a command raises to stop with a message for the user.

Its own module so that ``dandizarr.cli`` (which catches it) and the command modules (which
raise it) both import it from below, and neither imports the other.
"""

from __future__ import annotations


class CommandError(Exception):
    """A user-facing error: printed as ``dandizarr: <message>``, exit status 1 or given."""

    def __init__(self, message: str, exit_status: int = 1) -> None:
        super().__init__(message)
        self.exit_status = exit_status
