"""The image build commands the Dockerfile, the build script and docs/flex-template.md give use only what
`gcloud builds submit` accepts, and the Cloud Build config builds the Dockerfile there is."""
import json
import os
import re
import shlex
import subprocess

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# `gcloud builds submit` flags (gcloud reference, 2024-2026); it has no -f/--file.
GCLOUD_BUILDS_SUBMIT = {'--config', '--substitutions', '--tag', '--pack', '--project', '--region',
                        '--async', '--timeout', '--machine-type', '--disk-size', '--ignore-file',
                        '--gcs-source-staging-dir', '--gcs-log-dir', '--worker-pool',
                        '--service-account', '--no-source', '--suppress-logs'}


def _text(path: str) -> str:
    return open(os.path.join(REPO, path)).read()


def _printed_commands(**variables) -> list[list[str]]:
    """The gcloud commands dataflow_templates/build_and_run.sh prints with PRINT=1, as words;
    run with a PATH that has no gcloud."""
    env = {'PATH': '/usr/bin:/bin', 'PRINT': '1', 'PROJECT': 'p', 'REGION': 'us-central1',
           'BUCKET': 'b', **variables}
    result = subprocess.run(['bash', os.path.join(REPO, 'dataflow_templates/build_and_run.sh')],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return [shlex.split(line) for line in result.stdout.splitlines() if line.startswith('gcloud ')]


def _submit_commands() -> list[list[str]]:
    commands = [words for words in _printed_commands() if words[1:3] == ['builds', 'submit']]
    for path in ('dataflow_templates/Dockerfile', 'docs/flex-template.md'):
        text = re.sub(r'\\\n\s*', ' ', _text(path))
        for line in re.findall(r'gcloud builds submit[^\n`]*', text):
            commands.append(shlex.split(line.replace('$', ''), comments=True))
    return commands


@pytest.mark.slow   # It runs the build script.
def test_the_build_script_prints_its_gcloud_commands_without_gcloud():
    assert [words[:3] for words in _printed_commands()] == [
        ['gcloud', 'services', 'enable'], ['gcloud', 'artifacts', 'repositories'],
        ['gcloud', 'builds', 'submit'], ['gcloud', 'dataflow', 'flex-template']]
    enable = _printed_commands()[0]
    assert {'dataflow.googleapis.com', 'cloudbuild.googleapis.com', 'artifactregistry.googleapis.com',
            'storage.googleapis.com'} <= set(enable)
    build = _printed_commands(SERVICE_ACCOUNT='sa@p.iam.gserviceaccount.com')[-1]
    # The spec's defaults, which a launch from the console takes where its form is left empty.
    assert {'--temp-location=gs://b/tmp', '--staging-location=gs://b/staging',
            '--service-account-email=sa@p.iam.gserviceaccount.com'} <= set(build)


@pytest.mark.slow   # It runs the build script.
def test_the_launch_passes_only_template_parameters_and_values_their_regexes_take():
    """Dataflow checks a Flex Template launch's parameters against metadata.json: every one the
    script passes is declared there (the worker image is not a parameter: the image names
    itself, dataflow_templates/launcher.py), and its value matches the parameter's regexes."""
    run, = _printed_commands(RUN='1', INPUT='gs://b/raw', OUTPUT='gs://b/out')
    assert run[:4] == ['gcloud', 'dataflow', 'flex-template', 'run']
    assert '--temp-location=gs://b/tmp' in run
    parameters = dict(pair.split('=', 1) for word in run if word.startswith('--parameters=')
                      for pair in word.removeprefix('--parameters=').split(','))
    assert parameters == {'input_dir': 'gs://b/raw', 'output_dir': 'gs://b/out'}
    metadata = {p['name']: p for p in json.loads(_text('dataflow_templates/metadata.json'))['parameters']}
    for name, value in parameters.items():
        assert all(re.fullmatch(regex, value) for regex in metadata[name]['regexes']), name


@pytest.mark.slow   # It runs the build script.
def test_gcloud_builds_submit_commands_use_only_its_flags():
    commands = _submit_commands()
    assert len(commands) >= 2
    for words in commands:
        flags = {w.split('=', 1)[0] for w in words if w.startswith('-')}
        assert flags <= GCLOUD_BUILDS_SUBMIT, words
        assert '--config' in flags or flags == set()   # Prose mentions it without flags.


def test_cloud_build_config_builds_the_dockerfile_from_the_repository_root():
    config = yaml.safe_load(_text('dataflow_templates/cloudbuild.yaml'))
    args = config['steps'][0]['args']
    assert args[:3] == ['build', '-t', '${_IMAGE}'] and args[-1] == '.'
    dockerfile = args[args.index('-f') + 1]
    assert os.path.isfile(os.path.join(REPO, dockerfile))
    # The image is told its own name, which the launcher gives the workers.
    assert args[args.index('--build-arg') + 1] == 'SDK_CONTAINER_IMAGE=${_IMAGE}'
    assert config['images'] == ['${_IMAGE}']
