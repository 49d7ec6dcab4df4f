"""The splits a dataset has, in their order, and the names datasets give them (`val`)."""

SPLITS = ('train', 'validation', 'test')
ALIASES = {'val': 'validation', 'valid': 'validation'}


def split_of(name: str) -> str | None:
    """The split a name stands for (`val` -> `validation`), or None if it is none of SPLITS."""
    split = ALIASES.get(name.lower(), name.lower())
    return split if split in SPLITS else None
