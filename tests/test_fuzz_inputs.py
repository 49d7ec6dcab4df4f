"""Every parser of an input's own bytes, fuzzed a little in the suite: seeded, time-bounded runs
of benchmarks/fuzz_*.py (which run them as long as asked), each asserting that every case is
read, or reported as one input or refused in one line naming it, within the time and memory
bounds of benchmarks/fuzzing.py."""
import pytest

from benchmarks import fuzz_brace_patterns, fuzz_webdataset

SECONDS = 1.0


@pytest.mark.parametrize('fuzzer', [fuzz_brace_patterns, fuzz_webdataset], ids=lambda f: f.__name__.split('.')[-1])
def test_every_fuzzed_input_is_read_or_reported(fuzzer):
    assert fuzzer.fuzz(SECONDS, seed=0) > 0
