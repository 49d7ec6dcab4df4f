"""The one exception type a user sees (what went wrong, where, and how to fix it), and how a
command that was stopped ends."""
import re
import signal
import unicodedata

_RUNNER_SUFFIX = re.compile(r"( \[while running '[^']*'\])+$")
_BIDI = set('\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069')


def printable(text: str) -> str:
    """`text` with terminal control characters, line breaks and bidirectional overrides
    escaped (\\x1b, \\n, \\u2028, ...), so text from a file prints as one inert line."""
    return ''.join(
        c.encode('unicode_escape').decode() if c in _BIDI or unicodedata.category(c) in
        ('Cc', 'Zl', 'Zp') else c for c in str(text))


def shown(value: object, longest: int = 80) -> str:
    """A value as an error line shows it: its repr cut to `longest` characters, a huge integer by
    its size (Python refuses to print one of over 4,300 digits, and no reader wants one)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 18:
        digits = int(abs(value).bit_length() * 0.30103) + 1
        return f'{"-" if value < 0 else ""}(an integer of about {digits:,} digits)'
    try:
        text = repr(value)
    except Exception:   # A user's object whose repr fails (or is an integer too long to print).
        return f'(a {type(value).__name__})'
    return text if len(text) <= longest else f'{text[:longest - 4]}...{text[-1]}'


class DatasetError(Exception):
    """A problem with the user's input or options, described in one line (anything that
    would break the line or drive the terminal is escaped)."""

    MARKER = 'DatasetError: '

    def __init__(self, message: str):
        super().__init__(printable(message))

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


class Terminated(KeyboardInterrupt):
    """A signal that ends the command as Ctrl-C does (workers stopped, the output lock released,
    one line): SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 or SIGUSR2 (STOPPING_SIGNALS)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def line(self) -> str:
        return f'terminated ({signal.Signals(self.signum).name})'


STOPPING_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def stop_line(stop: KeyboardInterrupt, committed: str | None = None) -> tuple[str, int]:
    """The line and exit code of a command ended by Ctrl-C or a stopping signal; `committed`:
    the output folder, when the stop came once its dataset was committed. A command that
    followed a job a service runs says that the job goes on (`stop.job_goes_on`)."""
    what, code = ((stop.line, 128 + stop.signum) if isinstance(stop, Terminated)
                  else ('interrupted', 130))
    if committed is not None:
        return f'{what} after the dataset was committed to {printable(committed)}', code
    if getattr(stop, 'job_goes_on', None):
        return f'{what}: stopped following; {stop.job_goes_on}', code
    return f'{what}; rerun the same command to resume', code


def beam_refusal(exc: ValueError) -> DatasetError | None:
    """Beam's refusal of a job's options (a ValueError listing them on lines of their own) as one
    line; None for another ValueError."""
    if 'validations errors' not in str(exc):
        return None
    problems = '; '.join(line.strip() for line in str(exc).splitlines()[1:] if line.strip())
    return DatasetError(f'Dataflow would refuse these options: {problems}')
