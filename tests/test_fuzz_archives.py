"""The archive readers fuzzed for a few seconds (benchmarks/fuzz_archives.py runs the same fuzzer
for longer: `python -m benchmarks.fuzz_archives --seconds 300`)."""
import pytest

from benchmarks import fuzz_archives


@pytest.mark.slow
def test_mutated_archives_list_and_read_with_every_problem_reported(tmp_path):
    # Every problem a member with an error or a DamagedInput from a read; no case over
    # CASE_SECONDS or CASE_MEMORY in the worker process (measured there, case by case).
    report = fuzz_archives.run(seconds=4, seed=1, folder=str(tmp_path))
    assert report.failures == []
    assert report.cases >= 40   # About 80 a second on a 2-core machine, alone.
    # The cases reached every outcome: readable members, errors, damage found when read.
    assert {'member', 'directory', 'error', 'read', 'damaged'} <= set(report.counts)
    assert report.peak < fuzz_archives.CASE_MEMORY
