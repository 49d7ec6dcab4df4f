"""A Dataflow command from the command line, offline: options that cannot work are refused in
one line before anything touches the network, and a dry run checks the job without submitting."""
import re

import pytest

from pipeline.testing import imagemaker
from pipeline.testing.gcs_servers import BUCKET, download, upload
from tests.helpers import run_cli

pytestmark = pytest.mark.slow

CLOUD = ['--runner=DataflowRunner', '--project=my-project', '--region=us-central1']


@pytest.fixture
def raw(gcs):
    return upload({'train/a/1.jpg': imagemaker.jpeg(seed=1),
                   'train/b/2.jpg': imagemaker.jpeg(seed=2)}, 'raw')


def test_a_local_temp_location_is_one_line_before_any_network_access(tmp_path):
    result = run_cli(*CLOUD, f'--temp_location={tmp_path}/tmp',
                     '--input_dir=gs://no-such-bucket/raw', '--output_dir=gs://no-such-bucket/out')
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f'error: --temp_location={tmp_path}/tmp is not a Cloud Storage folder; Dataflow needs '
        '--temp_location=gs://BUCKET/FOLDER']


def test_dry_run_from_the_command_line_checks_the_job_and_submits_nothing(raw):
    result = run_cli(*CLOUD, '--dry_run=True', f'--temp_location=gs://{BUCKET}/tmp',
                     f'--input_dir={raw}', f'--output_dir=gs://{BUCKET}/out')
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == 'Dry run: nothing submitted. Checked:'
    assert re.fullmatch(r'  the job graph: \d+ steps; workers n2-standard-4, up to 32', lines[3])
    assert re.fullmatch(r'  the files staged for the workers: workflow.tar.gz \(\d+ KB\), '
                        r'submission_environment_dependencies.txt \(\d+ KB\)', lines[4])
    assert download('out') == {} and download('tmp') == {}
    missing = run_cli(*CLOUD, '--dry_run=True', f'--temp_location=gs://{BUCKET}/tmp',
                      f'--input_dir={raw}', '--output_dir=gs://no-such-bucket/out')
    assert missing.returncode == 2 and missing.stderr.splitlines() == [
        'error: bucket gs://no-such-bucket does not exist (for gs://no-such-bucket/out); create it '
        '(gcloud storage buckets create gs://no-such-bucket) or fix the path']


def test_dry_run_is_refused_for_a_local_run(tmp_path):
    inputs = tmp_path / 'in' / 'train' / 'a'
    inputs.mkdir(parents=True)
    (inputs / '1.jpg').write_bytes(imagemaker.jpeg(seed=1))
    result = run_cli('--dry_run=True', f'--input_dir={tmp_path}/in', f'--output_dir={tmp_path}/out')
    assert result.returncode == 2 and result.stderr.splitlines() == [
        'error: --dry_run checks a Dataflow job without submitting it; for a local run use '
        '--plan_only to see what it would write']
    assert not (tmp_path / 'out').exists()
