"""Labels as inputs state them (a WebDataset sample's .cls, .json or .txt member, a parquet
file's ClassLabel metadata, a labels file), read with what they may claim bounded before
anything is made of it: a class id below MAX_LABEL_ID (checked on its digits, before int()),
at most MAX_LABEL_ID class names, JSON at most MAX_JSON_DEPTH deep (checked on its brackets,
before the decoder recurses) and, for a parquet schema's metadata, of at most
MAX_METADATA_CONTAINERS objects and arrays and MAX_METADATA_VALUES values (counted on its bytes,
before a value is made). Each function raises ValueError saying what is wrong, in words
that follow the name of what holds it ('holds ...'); its caller names the file.
"""
import json
import re
import unicodedata
from typing import Any

from pipeline.base import json_size
from pipeline.base.settings import MAX_LABEL_ID

MAX_JSON_DEPTH = 64
MAX_METADATA = 64 << 20   # Bytes of a parquet schema's huggingface metadata (a million names fit).
MAX_METADATA_VALUES = 2_000_000     # JSON values of it, keys included: a million names fit too.
MAX_METADATA_CONTAINERS = 100_000   # JSON objects and arrays of it (a few per feature).
SHOWN = 40     # Characters of a bad value shown in a message.
_REWRITE = 'write the file again with datasets'
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?')   # One left open runs to the end.
_NOT_BRACKETS = re.compile(r'[^\[\]{}]+')


def excerpt(value: Any) -> str:
    """`value` as a message shows it: repr, cut to SHOWN characters with its length said."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= SHOWN:
        return repr(value) if isinstance(value, str) else text
    return f'{text[:SHOWN]!r}... ({len(text):,} characters)'


def class_id(text: str) -> int:
    """The class id `text` states: a whole number from 0 below MAX_LABEL_ID."""
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f'holds {excerpt(text)}, not a class id (a whole number from 0)')
    if len(text.lstrip('0')) > len(str(MAX_LABEL_ID)) or int(text) >= MAX_LABEL_ID:
        raise ValueError(f'holds class id {excerpt(text)}, not below {MAX_LABEL_ID:,}, the '
                         'bound on class ids')
    return int(text)


def class_name(text: str) -> str:
    """A class name (surrounding spaces dropped): one line of text, as labels.txt keeps it."""
    name = text.strip()
    if not name:
        raise ValueError('holds no class name')
    if any(unicodedata.category(c) in ('Cc', 'Zl', 'Zp') for c in name):
        raise ValueError('holds a line break or control character; a class name is one line')
    return name


def json_value(text: str) -> Any:
    """`text` decoded as JSON, its nesting checked first (the decoder recurses per level): its
    strings are dropped and its brackets kept, in C, and only those are walked."""
    depth = 0
    for bracket in _NOT_BRACKETS.sub('', _JSON_STRING.sub('', text)):
        if bracket in '[{':
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise ValueError(f'is JSON nested more than {MAX_JSON_DEPTH} deep')
        else:
            depth -= 1
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f'is not JSON: {str(exc)[:120]}') from None


def class_label_names(feature: dict) -> tuple[str, ...]:
    """The class names of a Hugging Face ClassLabel feature (`{"names": [...]}` or
    `{"num_classes": N}`, names '0'..'N-1'): at most MAX_LABEL_ID, each text, none twice. The
    reasons end with the fix."""
    names, count = feature.get('names'), feature.get('num_classes')
    if names:
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            raise ValueError(f'does not list its class names as text; {_REWRITE}')
        if len(names) > MAX_LABEL_ID:
            raise ValueError(f'lists {len(names):,} class names, more than the {MAX_LABEL_ID:,} '
                             f'this tool takes; {_REWRITE}')
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise ValueError(f'names {excerpt(name)} more than once; labels.txt needs a '
                                 "name per id: give each its own in the file's features")
            seen.add(name)
        return tuple(names)
    if count is None:
        return ()
    if isinstance(count, bool) or not isinstance(count, int):
        raise ValueError(f'gives num_classes {excerpt(count)}, not a whole number; {_REWRITE}')
    if not 0 <= count <= MAX_LABEL_ID:
        raise ValueError(f'gives num_classes {count:,}, not one of 0..{MAX_LABEL_ID:,}; '
                         f'{_REWRITE}')
    return tuple(str(i) for i in range(count))


def hub_features(metadata: bytes) -> dict:
    """The features of a parquet schema's `huggingface` metadata (`info.features`), at most
    MAX_METADATA bytes of it; ValueError when that is not what `datasets` writes."""
    if len(metadata) > MAX_METADATA:
        raise ValueError(f'{len(metadata):,} bytes, more than the {MAX_METADATA:,} read')
    excess = json_size.excess(metadata, MAX_METADATA_CONTAINERS, MAX_METADATA_VALUES)
    if excess:   # Counted before a value is made: 63 MiB of {} made 1.7 GB of dicts.
        raise ValueError(f'holds {excess}')
    document = json_value(metadata.decode('utf-8'))   # UnicodeDecodeError is a ValueError.
    info = document.get('info', {}) if isinstance(document, dict) else None
    features = info.get('features', {}) if isinstance(info, dict) else None
    if not isinstance(features, dict):
        raise ValueError('no object at info.features')
    return features
