r"""Brace patterns of shard lists (`train-{000000..001281}.tar`), expanded by the rules webdataset
expands them by (the braceexpand package, bash's rules): `{a,b}` alternatives, `{7..10}` integer
ranges, zero-padded to the wider bound when a bound starts with 0 (`{07..10}`), `{1..9..2}`
steps, either direction, `{a..e}` letter ranges, nesting, and a backslash escaping the next
character. Braces that hold neither a range nor a comma stay as they are (`{x}`). Escapes are
undone as braceexpand undoes them: in each name once per level of braces it passed through, so
an escaped backslash inside braces escapes the character after them (`{a,b\\}c` is `ac`, `bc`;
`{9\\}` is `{9}`).

A pattern is parsed into a tree first (at most MAX_DEPTH braces deep), whose count of names and
longest name are computed from the tree without expanding it, so a pattern that stands for more
than MAX_NAMES names, or for more than MAX_CHARACTERS characters in all, is refused before any
name is made.
"""
import dataclasses
import itertools
import math
import re
import string

_LETTERS = string.ascii_uppercase + string.ascii_lowercase
_NUMBERS = re.compile(r'^(-?\d+)\.\.(-?\d+)(?:\.\.-?(\d+))?$')
_CHARACTERS = re.compile(r'^([A-Za-z])\.\.([A-Za-z])(?:\.\.-?(\d+))?$')
_ESCAPED = re.compile(r'\\(.)')
MAX_NAMES = 1_000_000        # Names one pattern may stand for: more is a typo, not a shard list.
MAX_CHARACTERS = 1 << 26     # Characters of all its names together (names x the longest).
MAX_DEPTH = 32               # Braces inside braces.
MAX_DIGITS = 18              # Of a range's bounds and step.


@dataclasses.dataclass(frozen=True)
class _Range:
    """The names of a range, `{first..last..step}`, made when expanded."""
    names: range
    text: str     # 'numbers' (zero-padded to `width`) or 'letters'.
    width: int = 0

    def count(self) -> int:
        return len(self.names)

    def longest(self) -> int:
        if self.text == 'letters':
            return 1
        return max(self.width, *(len(str(bound)) for bound in (self.names[0], self.names[-1])))

    def expand(self) -> list[str]:
        if self.text == 'letters':
            return [_LETTERS[i] for i in self.names]
        return [f'{value:0{self.width}d}' for value in self.names]


@dataclasses.dataclass(frozen=True)
class _Alternatives:
    """`{a,b,...}`: the names of each item in turn."""
    items: tuple

    def count(self) -> int:
        return sum(_count(item) for item in self.items)

    def longest(self) -> int:
        return max(_longest(item) for item in self.items)

    def expand(self) -> list[str]:
        return [text for item in self.items for text in _expanded(item)]


@dataclasses.dataclass(frozen=True)
class _Kept:
    """`{x}`, braces that hold neither a range nor a comma: kept, their inside expanded."""
    inside: tuple

    def count(self) -> int:
        return _count(self.inside)

    def longest(self) -> int:
        return _longest(self.inside) + 2

    def expand(self) -> list[str]:
        return [f'{{{text}}}' for text in _expanded(self.inside)]


def expand(pattern: str) -> list[str]:
    """Every string `pattern` stands for, in order; ValueError for unbalanced braces, braces
    nested deeper than MAX_DEPTH, and more names or characters than the bounds allow."""
    parts = _parse(pattern, pattern, 0)
    count = _count(parts)
    if count > MAX_NAMES:
        raise ValueError(f'{pattern!r} stands for {count:,} names, more than the {MAX_NAMES:,} '
                         'one pattern may; check its ranges')
    if count * _longest(parts) > MAX_CHARACTERS:
        raise ValueError(f'{pattern!r} stands for {count:,} names of up to {_longest(parts):,} '
                         f'characters, more than the {MAX_CHARACTERS:,} characters in all one '
                         'pattern may; check its ranges and alternatives')
    return _expanded(parts)


def _count(parts: tuple) -> int:
    return math.prod(1 if isinstance(part, str) else part.count() for part in parts)


def _longest(parts: tuple) -> int:
    return sum(len(part) if isinstance(part, str) else part.longest() for part in parts)


def _expanded(parts: tuple) -> list[str]:
    """The names of `parts`, each with its escapes undone (those of the braces inside it were
    undone there already)."""
    pieces = [[part] if isinstance(part, str) else part.expand() for part in parts]
    names = [''.join(combination) for combination in itertools.product(*pieces)]
    if not any('\\' in text for piece in pieces for text in piece):   # As a rule: nothing to undo.
        return names
    return [_ESCAPED.sub(r'\1', name) for name in names]


def _parse(text: str, pattern: str, depth: int) -> tuple:
    """The parts of `text` (a part of `pattern`, `depth` braces deep): literal strings, their
    escapes kept (`_expanded` undoes them), and the braces between them."""
    if depth > MAX_DEPTH:
        raise ValueError(f'braces nest more than {MAX_DEPTH} deep; a shard list needs a few '
                         'at most')
    parts, start, level, position = [], 0, 0, 0
    while position < len(text):
        character = text[position]
        if character == '\\':
            position += 2
            continue
        if character == '{':
            if level == 0:
                parts.append(text[start:position])
                start = position
            level += 1
        elif character == '}':
            level -= 1
            if level < 0:
                break
            if level == 0:
                parts.append(_braces(text[start + 1:position], pattern, depth + 1))
                start = position + 1
        position += 1
    if level != 0:
        raise ValueError(f'unbalanced braces in {pattern!r}')
    parts.append(text[start:])
    return tuple(part for part in parts if part != '')


def _braces(inside: str, pattern: str, depth: int):
    """What `{inside}` stands for: a range, alternatives, or itself."""
    if found := _NUMBERS.match(inside):
        return _numbers(*found.groups(), pattern)
    if found := _CHARACTERS.match(inside):
        return _letters(*found.groups(), pattern)
    items = _alternatives(inside)
    if len(items) == 1:
        return _Kept(_parse(inside, pattern, depth))
    return _Alternatives(tuple(_parse(item, pattern, depth) for item in items))


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


def _numbers(first: str, last: str, step: str | None, pattern: str) -> _Range:
    if max(len(first.lstrip('-')), len(last.lstrip('-')), len(step or '')) > MAX_DIGITS:
        raise ValueError(f'{pattern!r} has a range bound or step of more than {MAX_DIGITS} '
                         'digits; check its ranges')
    padded = any(bound.startswith(('0', '-0')) for bound in (first, last)
                 if bound not in ('0', '-0'))
    width = max(len(first), len(last)) if padded else 0
    step_size = int(step or 1) or 1
    low, high = int(first), int(last)
    values = (range(low, high + 1, step_size) if low < high
              else range(low, high - 1, -step_size))
    return _Range(values, 'numbers', width)


def _letters(first: str, last: str, step: str | None, pattern: str) -> _Range:
    if len(step or '') > MAX_DIGITS:
        raise ValueError(f'{pattern!r} has a range step of more than {MAX_DIGITS} digits; check '
                         'its ranges')
    step_size = int(step or 1) or 1
    low, high = _LETTERS.index(first), _LETTERS.index(last)
    return _Range(range(low, high + 1, step_size) if low < high
                  else range(low, high - 1, -step_size), 'letters')
