"""The choices of the flags whose value decides what the stages do. Each is a `str` enum: the
flag's text is its value, and that value is what summary.json records."""
import enum


class LeakageAction(str, enum.Enum):
    """--leakage: what near-duplicates across splits do."""
    REPORT = 'report'   # listed in leakage.jsonl
    DROP = 'drop'       # listed, and their members in later splits left out
    FAIL = 'fail'       # listed, and nothing committed
    OFF = 'off'         # no perceptual hashes, no check

    def __str__(self) -> str:
        return self.value


class DamagedAction(str, enum.Enum):
    """--damaged_images: what a JPEG that decodes only with libjpeg warnings becomes."""
    SKIP = 'skip'           # reported, not stored
    KEEP = 'keep'           # stored as it is
    REENCODE = 'reencode'   # stored as Pillow decodes it

    def __str__(self) -> str:
        return self.value


def values(choice: type[enum.Enum]) -> tuple[str, ...]:
    """The flag texts of a choice, in their order (argparse's `choices`)."""
    return tuple(member.value for member in choice)
