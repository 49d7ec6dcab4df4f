"""Split names as datasets spell them (`val`, `valid`), mapped to the splits a dataset here has
(pipeline/output/metadata.py SPLITS)."""
from pipeline.output.metadata import SPLITS

ALIASES = {'val': 'validation', 'valid': 'validation'}


def split_of(name: str) -> str | None:
    """The split a name stands for (`val` -> `validation`), or None if it is none of SPLITS."""
    split = ALIASES.get(name.lower(), name.lower())
    return split if split in SPLITS else None
