"""Brace patterns of shard lists (`train-{000000..001281}.tar`), expanded by the rules webdataset
expands them by (the braceexpand package, bash's rules): `{a,b}` alternatives, `{7..10}` integer
ranges, zero-padded to the wider bound when a bound starts with 0 (`{07..10}`), `{1..9..2}`
steps, either direction, `{a..e}` letter ranges, nesting, and a backslash escaping the next
character. Braces that hold neither a range nor a comma stay as they are (`{x}`).
"""
import itertools
import math
import re
import string

_LETTERS = string.ascii_uppercase + string.ascii_lowercase
_NUMBERS = re.compile(r'^(-?\d+)\.\.(-?\d+)(?:\.\.-?(\d+))?$')
_CHARACTERS = re.compile(r'^([A-Za-z])\.\.([A-Za-z])(?:\.\.-?(\d+))?$')
_ESCAPED = re.compile(r'\\(.)')
MAX_NAMES = 1_000_000   # Names one pattern may stand for: more is a typo, not a shard list.


def expand(pattern: str) -> list[str]:
    """Every string `pattern` stands for, in order; ValueError for unbalanced braces."""
    return [_ESCAPED.sub(r'\1', text) for text in _expand(pattern, pattern)]


def _expand(text: str, pattern: str) -> list[str]:
    """The expansions of `text` (a part of `pattern`), backslash escapes still in them."""
    pieces, start, depth, position = [], 0, 0, 0
    while position < len(text):
        character = text[position]
        if character == '\\':
            position += 2
            continue
        if character == '{':
            if depth == 0:
                pieces.append([text[start:position]])
                start = position
            depth += 1
        elif character == '}':
            depth -= 1
            if depth < 0:
                break
            if depth == 0:
                pieces.append(_expression(text[start + 1:position], pattern))
                start = position + 1
        position += 1
    if depth != 0:
        raise ValueError(f'unbalanced braces in {pattern!r}')
    pieces.append([text[start:]])
    _check_count(math.prod(map(len, pieces)), pattern)
    return [''.join(parts) for parts in itertools.product(*pieces)]


def _check_count(count: int, pattern: str) -> None:
    if count > MAX_NAMES:
        raise ValueError(f'{pattern!r} stands for {count:,} names, more than the {MAX_NAMES:,} '
                         'one pattern may; check its ranges')


def _expression(inside: str, pattern: str) -> list[str]:
    """What `{inside}` stands for: a range, alternatives, or itself."""
    if found := _NUMBERS.match(inside):
        first, last, step = found.groups()
        _check_count(abs(int(last) - int(first)) // (int(step or 1) or 1) + 1, pattern)
        return _numbers(first, last, step)
    if found := _CHARACTERS.match(inside):
        return _characters(*found.groups())
    items = _alternatives(inside)
    if len(items) == 1:
        return [f'{{{text}}}' for text in _expand(inside, pattern)]
    return [text for item in items for text in _expand(item, pattern)]


def _alternatives(inside: str) -> list[str]:
    """`inside` cut at its commas outside nested braces (one item: no comma)."""
    items, start, depth, position = [], 0, 0, 0
    while position < len(inside):
        character = inside[position]
        if character == '\\':
            position += 2
            continue
        depth += {'{': 1, '}': -1}.get(character, 0)
        if character == ',' and depth == 0:
            items.append(inside[start:position])
            start = position + 1
        position += 1
    return items + [inside[start:]] if depth == 0 else [inside]


def _numbers(first: str, last: str, step: str | None) -> list[str]:
    padded = any(bound.startswith(('0', '-0')) for bound in (first, last)
                 if bound not in ('0', '-0'))
    width = max(len(first), len(last)) if padded else 0
    step_size = int(step or 1) or 1
    low, high = int(first), int(last)
    values = (range(low, high + 1, step_size) if low < high
              else range(low, high - 1, -step_size))
    return [f'{value:0{width}d}' for value in values]


def _characters(first: str, last: str, step: str | None) -> list[str]:
    step_size = int(step or 1) or 1
    low, high = _LETTERS.index(first), _LETTERS.index(last)
    if low < high:
        return list(_LETTERS[low:high + 1:step_size])
    return list(_LETTERS[low:(high - 1 if high else None):-step_size])
