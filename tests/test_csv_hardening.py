"""CSV rows that claim more than a row holds: each a reported input naming the file and line,
the rest converted, in processes that stay small."""
import json

import pytest

from pipeline.testing import imagemaker
from pipeline.testing.process_memory import GIB, run_sampled


@pytest.mark.slow
def test_sizes_that_are_no_numbers_and_a_quote_never_closed_are_reported_lines(tmp_path):
    """A size of 5,000 digits ended the run in int()'s ValueError, `²` (a digit to isdigit) too;
    a quote left open made the rest of a 300 MiB file one chunk, read and decoded whole."""
    (tmp_path / 'a.jpg').write_bytes(imagemaker.jpeg(24, 16))
    csv_path = tmp_path / 'train.csv'
    with open(csv_path, 'wb') as out:
        out.write(b'uri,label,size\na.jpg,cat,631\nb.jpg,cat,\xc2\xb2\n'
                  + b'c.jpg,cat,' + b'7' * 5000 + b'\nd.jpg,"cat\n')
        out.write(b'x' * (300 << 20))
    result = run_sampled(f'--csv_train={csv_path}', f'--output_dir={tmp_path}/out',
                         '--max_error_ratio=1')
    assert result.returncode == 0, result.stderr
    assert result.largest < GIB // 2, result.peaks
    with open(f'{tmp_path}/out/errors-train.jsonl') as stream:
        reasons = [json.loads(line)['reason'] for line in stream]
    assert sorted(reasons) == [
        f"{csv_path} line 3: size '²' is not a whole number of bytes",
        f"{csv_path} line 4: size {'7' * 40!r}... (5,000 characters) is not a whole number of "
        'bytes',
        f'{csv_path} line 5: this record runs past 8 MiB (more than is read at once) with no '
        'line break outside quotes: a quote that is never closed? Close it']
    summary = json.load(open(f'{tmp_path}/out/summary.json'))['splits']['train']
    assert (summary['records'], summary['skipped']) == (1, 3)
