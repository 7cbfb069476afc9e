"""The one exception type that the CLI turns into a clean message instead of a traceback."""


class GnnrunError(Exception):
    """A problem the user can fix: the message names the problem and the fix."""
