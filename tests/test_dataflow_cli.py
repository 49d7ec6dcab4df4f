"""A Dataflow command from the command line, offline: options that cannot work are refused in
one line before anything touches the network, and a dry run checks the job without submitting."""
import os
import re
import socket
import sys

import pytest

from pipeline.testing import imagemaker
from pipeline.testing.gcs_servers import BUCKET, download, upload
from tests.helpers import cli, run_cli, write_tree

CLOUD = ['--runner=DataflowRunner', '--project=my-project', '--region=us-central1']
STAGES = ['List Examples', 'Plan Conversion', 'Encode Chunks', 'Check Quality', 'Write Shards',
          'Commit Dataset']


@pytest.fixture
def raw(gcs):
    return upload({'train/a/1.jpg': imagemaker.jpeg(seed=1),
                   'train/b/2.jpg': imagemaker.jpeg(seed=2)}, 'raw')


def test_a_local_temp_location_is_one_line_before_any_network_access(tmp_path):
    result = cli(*CLOUD, f'--temp_location={tmp_path}/tmp',
                     '--input_dir=gs://no-such-bucket/raw', '--output_dir=gs://no-such-bucket/out')
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f'error: --temp_location={tmp_path}/tmp is not a Cloud Storage folder; Dataflow needs '
        '--temp_location=gs://BUCKET/FOLDER']


def test_a_job_without_a_project_or_with_a_local_path_is_one_line_before_any_listing(tmp_path):
    (tmp_path / 'in').mkdir()
    job = ['--temp_location=gs://my-bucket/tmp', f'--input_dir={tmp_path}/in']
    answers = {
        'no project': cli('--runner=DataflowRunner', *job, '--output_dir=gs://my-bucket/out'),
        'local output': cli(*CLOUD, '--dry_run=true', *job, f'--output_dir={tmp_path}/out'),
        'template, local output': cli(*CLOUD, f'--template_location={tmp_path}/job.json', *job,
                                      f'--output_dir={tmp_path}/out'),
        'local input': cli(*CLOUD, *job, '--output_dir=gs://my-bucket/out'),
        # Without --temp_location Beam would create a default bucket: retries, offline.
        'dry run, no temp': cli(*CLOUD, '--dry_run=true', f'--input_dir={tmp_path}/in',
                                '--output_dir=gs://my-bucket/out'),
        'bucket name': cli(*CLOUD, '--dry_run=true', *job, '--output_dir=gs://My_Bucket/out'),
        'bucket as an IP': cli(f'--input_dir={tmp_path}/in', '--output_dir=gs://10.0.0.1/out'),
        'a scheme mistyped': cli(f'--input_dir={tmp_path}/in', '--output_dir=gs:/my-bucket/out')}
    assert {name: (a.returncode, a.stderr.splitlines()) for name, a in answers.items()} == {
        'no project': (2, ['error: --runner=DataflowRunner needs --project=PROJECT_ID, the Google '
                           'Cloud project the job runs in (and --region=REGION, e.g. us-central1, '
                           'unless gcloud config has compute/region)']),
        'local output': (2, [f'error: --output_dir={tmp_path}/out is on this machine, and a '
                             'Dataflow job writes to Cloud Storage: give --output_dir=gs://BUCKET/'
                             'FOLDER']),
        'template, local output': (2, [f'error: --output_dir={tmp_path}/out is on this machine, '
                                       'and a Dataflow job writes to Cloud Storage: give '
                                       '--output_dir=gs://BUCKET/FOLDER']),
        'local input': (2, [f'error: {tmp_path}/in is on this machine, and Dataflow workers read '
                            f'only Cloud Storage: copy it to a bucket (gcloud storage cp -r '
                            f'{tmp_path}/in gs://BUCKET/FOLDER) and give that path']),
        'dry run, no temp': (2, ['error: --dry_run=true needs --temp_location=gs://BUCKET/FOLDER '
                                 '(the folder the job would keep its temporary files in): without '
                                 'it Beam creates a default bucket, which a dry run does not']),
        'bucket name': (2, ["error: --output_dir gs://My_Bucket/out: 'My_Bucket' is not a bucket "
                            'name (3-63 lowercase letters, digits, dashes, underscores and dots, a '
                            'letter or digit at each end)']),
        'bucket as an IP': (2, ["error: --output_dir gs://10.0.0.1/out: '10.0.0.1' is not a bucket "
                                'name (no bucket is named like an IP address, starts with "goog" '
                                'or holds "google")']),
        'a scheme mistyped': (2, ['error: --output_dir gs:/my-bucket/out: paths are local or '
                                  'gs://BUCKET/... (not gs:/...)'])}
    assert not os.path.exists('gs:')


def test_dry_run_from_the_command_line_checks_the_job_and_submits_nothing(raw):
    result = cli(*CLOUD, '--dry_run=True', f'--temp_location=gs://{BUCKET}/tmp',
                     f'--input_dir={raw}', f'--output_dir=gs://{BUCKET}/out')
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ['Dry run: nothing submitted.', 'Checked: the buckets of the input and of '
                         f'gs://{BUCKET}/out, with your credentials']
    assert re.fullmatch(r'Job graph: \d+ steps in these stages: ' + ', '.join(STAGES), lines[3])
    assert re.fullmatch(r'Staged for the workers: workflow.tar.gz \(\d+ KB\), '
                        r'submission_environment_dependencies.txt \(\d+ KB\)', lines[5])
    assert download('out') == {} and download('tmp') == {}
    missing = cli(*CLOUD, '--dry_run=True', f'--temp_location=gs://{BUCKET}/tmp',
                      f'--input_dir={raw}', '--output_dir=gs://no-such-bucket/out')
    assert missing.returncode == 2 and missing.stderr.splitlines() == [
        'error: bucket gs://no-such-bucket does not exist (for gs://no-such-bucket/out); create it '
        '(gcloud storage buckets create gs://no-such-bucket) or fix the path']


def test_dry_run_is_refused_for_a_local_run(tmp_path):
    inputs = tmp_path / 'in' / 'train' / 'a'
    inputs.mkdir(parents=True)
    (inputs / '1.jpg').write_bytes(imagemaker.jpeg(seed=1))
    result = cli('--dry_run=True', f'--input_dir={tmp_path}/in', f'--output_dir={tmp_path}/out')
    assert result.returncode == 2 and result.stderr.splitlines() == [
        'error: --dry_run checks a Dataflow job without submitting it; for a local run use '
        '--plan_only to see what it would write']
    assert not (tmp_path / 'out').exists()


@pytest.mark.slow
def test_dry_run_without_credentials_is_offline_and_prints_what_would_be_submitted(tmp_path):
    """Google's auth library reads where the metadata server is when it is imported: without
    credentials is a process of its own."""
    inputs = write_tree(tmp_path / 'in', {f'train/c{i % 2}/{i}.jpg': imagemaker.jpeg(40, 30, seed=i)
                                          for i in range(6)})
    gcloud = tmp_path / 'gcloud'
    gcloud.mkdir()
    env = {k: v for k, v in os.environ.items()
           if 'EMULATOR' not in k and k not in ('GOOGLE_APPLICATION_CREDENTIALS',
                                                 'GOOGLE_CLOUD_PROJECT')}
    with socket.socket() as silent:   # A metadata server that never answers: no machine account.
        silent.bind(('127.0.0.1', 0))
        silent.listen()
        host = f'127.0.0.1:{silent.getsockname()[1]}'
        env.update(HOME=str(tmp_path), CLOUDSDK_CONFIG=str(gcloud), GCE_METADATA_HOST=host,
                   GCE_METADATA_IP=host)
        result = run_cli(*CLOUD, '--dry_run=true', '--temp_location=gs://my-bucket/tmp',
                         f'--input_dir={inputs}', '--output_dir=gs://my-bucket/out', env=env,
                         cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:3] == [
        'Dry run: nothing submitted.',
        'No Google Cloud credentials found: the buckets were not checked (sign in with gcloud '
        'auth application-default login and run it again to check them)',
        'Dataflow options: project my-project, region us-central1, temp gs://my-bucket/tmp, '
        'staging gs://my-bucket/tmp']
    assert re.fullmatch(r'Job graph: \d+ steps in these stages: ' + ', '.join(STAGES), lines[3])
    assert lines[4] == ('Workers: n2-standard-4, 1 at first and up to 32 (THROUGHPUT_BASED '
                        'autoscaling), 4 harness threads per SDK process, 30 GB disk; code: this '
                        f'package built from {os.path.dirname(os.path.dirname(__file__))}/setup.py')
    assert lines[5] == (f'Input on this machine ({inputs}): listed and planned here; the job '
                        'itself needs it on gs:// (Dataflow workers read only Cloud Storage)')
    assert re.fullmatch(r'Staged for the workers: workflow.tar.gz \(\d+ KB\), '
                        r'submission_environment_dependencies.txt \(\d+ KB\)', lines[6])
    assert lines[8] == 'Plan (listed here, with the Dataflow estimate):'
    assert lines[10].split()[:2] == ['train', '6'] and '6 images' in result.stdout
    assert sorted(os.listdir(tmp_path)) == ['gcloud', 'in']

    refused = run_cli(*CLOUD, '--dry_run=true', '--temp_location=gs://my-bucket/tmp',
                      '--input_dir=gs://my-bucket/in', '--output_dir=gs://my-bucket/out',
                      env=dict(env, GOOGLE_APPLICATION_CREDENTIALS=str(tmp_path / 'none.json')),
                      timeout=120)
    assert refused.returncode == 2 and refused.stderr.splitlines() == [
        'error: gs://my-bucket/in is read to build the job (its splits, labels and listing): a dry '
        'run without Google Cloud credentials needs the input on local disk; or sign in (gcloud '
        'auth application-default login)']
    no_region = run_cli(*CLOUD[:2], '--dry_run=true', '--temp_location=gs://my-bucket/tmp',
                        f'--input_dir={inputs}', '--output_dir=gs://my-bucket/out',
                        env=dict(env, PATH=os.path.dirname(sys.executable)), timeout=120)
    assert no_region.returncode == 2 and no_region.stderr.splitlines() == [
        'error: Dataflow would refuse these options: Missing required option: region.']
    shards = run_cli(*CLOUD, '--dry_run=true', '--temp_location=gs://my-bucket/tmp',
                     '--webdataset=train=gs://my-bucket/wds/train-{0..3}.tar',
                     '--output_dir=gs://my-bucket/out',
                     env=dict(env, GOOGLE_APPLICATION_CREDENTIALS=str(tmp_path / 'none.json')),
                     timeout=120)
    assert shards.returncode == 2 and shards.stderr.splitlines() == [
        'error: gs://my-bucket/wds/train-{0..3}.tar is read to build the job (its splits, labels '
        'and listing): a dry run without Google Cloud credentials needs the input on local disk; '
        'or sign in (gcloud auth application-default login)']
