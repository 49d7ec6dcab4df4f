"""The one exception type a user sees: what went wrong, where, and how to fix it."""
import re

_RUNNER_SUFFIX = re.compile(r"( \[while running '[^']*'\])+$")


class DatasetError(Exception):
    """A problem with the user's input or options, described in one line."""

    MARKER = 'DatasetError: '

    @classmethod
    def find_in(cls, exc: BaseException) -> str | None:
        """Returns the message of a DatasetError raised anywhere below `exc`.

        Runners wrap worker exceptions in their own types and often keep only the text, so the
        message is recovered from the chain of causes or from the text itself.
        """
        seen = set()
        while exc is not None and id(exc) not in seen:
            seen.add(id(exc))
            if isinstance(exc, cls):
                return _RUNNER_SUFFIX.sub('', str(exc))
            text = str(exc)
            if cls.MARKER in text:
                line = text.split(cls.MARKER, 1)[1].splitlines()[0].strip().strip('\'"')
                return _RUNNER_SUFFIX.sub('', line)
            exc = exc.__cause__ or exc.__context__
        return None
