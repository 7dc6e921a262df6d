"""The one exception type the CLI turns into a one-line message, and how to find it."""

from typing import Optional


class ConfigError(ValueError):
    """A user mistake in a config, a name or an input file.

    The message is one line that names the problem and the fix; the CLI prints
    it as ``error: <message>`` and exits with status 2, without a traceback.
    """


def find_config_error(err: BaseException) -> Optional[ConfigError]:
    """The :class:`ConfigError` behind ``err`` (jsonargparse wraps ours in its own), if any."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, ConfigError):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None
