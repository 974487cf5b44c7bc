"""The one exception the CLI turns into a one-line message and exit status 1."""


class UserError(Exception):
    """Bad input from the person at the keyboard: the message says what to fix."""
