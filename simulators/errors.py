"""The simulators' one error: bad options or a pseudo-terminal that cannot be opened.

A plain exception, so the simulators need nothing from the ``frota`` command line; the CLI
(``frota/cli.py``) prints it as its one-line message and exits 1.
"""


class SimulatorError(Exception):
    """A simulator cannot run as asked: the message says what to fix."""
