"""The one exception type that the CLI turns into a clean message instead of a traceback."""

import difflib


class GnnrunError(Exception):
    """A problem the user can fix: the message names the problem and the fix."""


class Stopped(GnnrunError):
    """The command was stopped from outside (a signal, as `kill` or `timeout` send): its
    settings did not fail, and a sweep stops with it rather than go on to the next point."""


def os_error_message(exc: OSError) -> str:
    """One line for an OSError that reached the command line: the file, the reason, the fix."""
    where = f" {exc.filename}" if exc.filename is not None else ""
    reason = (exc.strerror or str(exc)).lower()
    return f"cannot use{where}: {reason}; check that the path exists and is writable by you"


def did_you_mean(name: str, choices: list[str] | tuple[str, ...]) -> str:
    """ " (did you mean X?)" with the choice closest to a misspelt `name`, or "" when none is."""
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


class ReportedError(SystemExit):
    """Exit status 1 after the CLI printed the error: a local sweep records `message`
    as its point's failure and goes on to the next point."""

    def __init__(self, message: str, stopped: bool = False) -> None:
        super().__init__(1)
        self.message = message
        self.stopped = stopped  # a Stopped error: the sweep ends here
