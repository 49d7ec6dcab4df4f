"""Every parser of an input's own bytes, fuzzed a little in the suite: seeded, time-bounded runs
of benchmarks/fuzz_*.py (which run them as long as asked), each asserting that every case is
read, or reported as one input or refused in one line naming it, within the time and memory
bounds of benchmarks/fuzzing.py."""
import subprocess
import sys

import pytest

from benchmarks import (fuzz_brace_patterns, fuzz_csv, fuzz_labels_file, fuzz_ref_codec,
                        fuzz_thrift, fuzz_webdataset)

SECONDS = 1.0


@pytest.mark.parametrize('fuzzer', [fuzz_brace_patterns, fuzz_webdataset, fuzz_csv,
                                    fuzz_labels_file, fuzz_thrift, fuzz_ref_codec],
                         ids=lambda f: f.__name__.split('.')[-1])
def test_every_fuzzed_input_is_read_or_reported(fuzzer):
    assert fuzzer.fuzz(SECONDS, seed=0) > 0


@pytest.mark.slow
def test_every_fuzzed_parquet_file_is_read_or_reported_in_a_process_of_its_own():
    """pyarrow's native code runs here: a malformed footer once ended the process (a C++
    exception through pyarrow's metadata objects), which would end the test runner too."""
    result = subprocess.run([sys.executable, '-m', 'benchmarks.fuzz_parquet', '--seconds', '2',
                             '--seed', '0'], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert 'every one read or reported' in result.stdout
