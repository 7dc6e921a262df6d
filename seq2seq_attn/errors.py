"""The one exception type the CLI turns into a one-line message."""


class ConfigError(ValueError):
    """A user mistake in a config, a name or an input file.

    The message is one line that names the problem and the fix; the CLI prints
    it as ``error: <message>`` and exits with status 2, without a traceback.
    """
