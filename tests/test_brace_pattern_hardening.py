"""Brace patterns that claim more than a shard list (`--webdataset`) may hold: refused in one
line before a name is made, whatever they claim, in a process that stays small."""
import pytest

from tests.helpers import cli
from pipeline.testing.process_memory import GIB, run_sampled


@pytest.mark.slow
def test_alternatives_that_claim_sixty_million_names_are_counted_not_expanded(tmp_path):
    alternatives = ','.join(['{0..999999}'] * 60)
    given = f'train=/data/s-{{{alternatives}}}.tar'
    result = run_sampled(f'--webdataset={given}', f'--output_dir={tmp_path}/out')
    assert result.returncode == 2 and result.stderr.splitlines() == [
        f"error: --webdataset {given}: '/data/s-{{{alternatives}}}.tar' stands for 60,000,000 "
        'names, more than the 1,000,000 one pattern may; check its ranges']
    # Expanded before it was counted, the list took 2.8 GB.
    assert result.largest < GIB // 2, result.peaks


@pytest.mark.slow
def test_braces_nested_three_thousand_deep_are_refused_in_one_line(tmp_path):
    pattern = '/data/s-' + '{a,' * 3000 + 'b' + '}' * 3000 + '.tar'
    result = cli(f'--webdataset=train={pattern}', f'--output_dir={tmp_path}/out')
    assert result.returncode == 2 and result.stderr.splitlines() == [
        f'error: --webdataset train={pattern}: braces nest more than 32 deep; a shard list '
        'needs a few at most']
