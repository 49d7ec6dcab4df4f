"""The loop every input fuzzer (benchmarks/fuzz_*.py) runs: seeded, time-bounded, one invariant.

A fuzzer gives `make(rng)`, a hostile input built from its seeds (each a well-formed input)
by a few mutations, and `check(case)`, which raises AssertionError when the parser's answer
breaks the rule of the house: an input is read, or it is one reported input or one clear
error naming it, never another exception. `run` also holds each case to CASE_SECONDS (a parser
quadratic in what an input claims takes far longer on the cases that claim much) and the
process to MEMORY_BOUND more than it held before (its peak resident memory, reset at the start
where Linux allows).
The same fuzzer runs in the suite for a second or so and here for as long as asked:

    python -m benchmarks.fuzz_brace_patterns --seconds 300 [--seed 1]
"""
import argparse
import random
import time
from typing import Callable

CASE_SECONDS = 10.0       # The largest cases take about a second; this is far from that.
MEMORY_BOUND = 1 << 30    # Of the fuzzing process, bytes.
SHOWN = 300               # Characters of a failing case in the message.
MAX_CASE_BYTES = 8 << 20  # Of a case mutations make (hostile sizes are the fuzzers' own).


def run(make: Callable[[random.Random], object], check: Callable[[object], None],
        seconds: float, seed: int) -> int:
    """Checks cases made by `make` for `seconds`; returns how many. AssertionError names the
    first case that breaks the rule (its seed and number reproduce it)."""
    _reset_peak()
    held = peak_memory()   # What the process held before (a test runner: much).
    rng, deadline, cases = random.Random(seed), time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        case = make(rng)
        started = time.monotonic()
        try:
            check(case)
        except Exception as exc:
            raise AssertionError(f'seed {seed} case {cases}: {exc!r} on {_shown(case)}') from exc
        took = time.monotonic() - started
        assert took < CASE_SECONDS, f'seed {seed} case {cases} took {took:.1f} s: {_shown(case)}'
        cases += 1
    assert peak_memory() - held < MEMORY_BOUND, (
        f'seed {seed}: the process peaked at {peak_memory():,} bytes, {held:,} held before')
    return cases


def mutated(rng: random.Random, seed: bytes, tokens: list[bytes], steps: int = 4) -> bytes:
    """`seed` with up to `steps` mutations: a token inserted (now and then many times over), a
    byte range dropped, repeated or flipped; what an insertion would take past MAX_CASE_BYTES is
    left out."""
    data = bytearray(seed)
    for _ in range(rng.randint(1, steps)):
        at = rng.randint(0, len(data))
        action = rng.randrange(4)
        if action in (0, 2):
            piece = rng.choice(tokens) if action == 0 else data[at:at + rng.randint(1, 8)]
            times = rng.choice((1, 1, 2, 50, 5000) if action == 0 else (2, 100, 10000))
            data[at:at] = piece * min(times, (MAX_CASE_BYTES - len(data)) // max(1, len(piece)))
        elif action == 1:
            del data[at:at + rng.randint(1, 16)]
        elif data:
            data[min(at, len(data) - 1)] ^= 1 << rng.randrange(8)
    return bytes(data)


def main(fuzz: Callable[[float, int], int], name: str) -> None:
    parser = argparse.ArgumentParser(description=f'Fuzz {name} for as long as asked.')
    parser.add_argument('--seconds', type=float, default=60)
    parser.add_argument('--seed', type=int, default=1)
    args = parser.parse_args()
    cases = fuzz(args.seconds, args.seed)
    print(f'{name}: {cases:,} cases in {args.seconds:.0f} s (seed {args.seed}), every one read '
          f'or reported; peak memory {peak_memory() / (1 << 20):.0f} MiB')


def peak_memory() -> int:
    with open('/proc/self/status') as stream:
        return next(int(line.split()[1]) << 10 for line in stream if line.startswith('VmHWM:'))


def _reset_peak() -> None:
    try:
        with open('/proc/self/clear_refs', 'w') as stream:
            stream.write('5')   # Resets VmHWM to the current resident size.
    except OSError:
        pass


def _shown(case: object) -> str:
    text = repr(case)
    return text if len(text) <= SHOWN else f'{text[:SHOWN]}... ({len(text):,} characters)'

