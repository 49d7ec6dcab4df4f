"""Beam's own job service on 127.0.0.1, whose workers hold only what a submission stages: the
stand-in of a remote service (Dataflow, a Flink or Spark job server) for the tests.

`worker_python(folder)` makes a virtual environment that holds the package as a Dataflow
submission stages it (`workflow.tar.gz`, built from setup.py by Beam's Stager) installed without
its dependencies, and reaches the dependencies through a `.pth` line naming this environment's
site-packages: a plain path, so the `.pth` files there (this checkout's editable install among
them) are not run. A module or data file the package leaves out fails an import in the workers,
as it would on Dataflow. `JobService` runs `local_job_service_main` with those workers (a
subprocess each, `beam:env:harness_subprocess_python:v1`), outside the checkout and without
PYTHONPATH.
"""
import contextlib
import os
import site
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUBPROCESS_WORKERS = 'beam:env:harness_subprocess_python:v1'


def staged_package(folder: str) -> str:
    """workflow.tar.gz as a submission with --setup_file stages it, built into `folder`."""
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.portability.api import beam_runner_api_pb2 as api
    from apache_beam.runners.portability.stager import Stager

    from pipeline.dataflow import one_build_at_a_time
    options = PipelineOptions([f'--setup_file={REPO}/setup.py'])
    with one_build_at_a_time(options):
        for resource in Stager.create_job_resources(options, folder):
            role = api.ArtifactStagingToRolePayload.FromString(resource.role_payload)
            if role.staged_name == 'workflow.tar.gz':
                return api.ArtifactFilePayload.FromString(resource.type_payload).path
    raise RuntimeError('the Stager staged no workflow.tar.gz')


def worker_python(folder: str) -> str:
    """The python of a new virtual environment in `folder` (see the module docstring)."""
    venv = os.path.join(folder, 'venv')
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', venv], check=True)
    python = os.path.join(venv, 'bin', 'python')
    target = subprocess.run([python, '-c', 'import sysconfig; print(sysconfig.get_path("purelib"))'],
                            check=True, capture_output=True, text=True, cwd=folder).stdout.strip()
    subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', '--no-deps',
                    '--no-build-isolation', '--no-compile', '--target', target,
                    staged_package(tempfile.mkdtemp(dir=folder))], check=True)
    ours = sysconfig.get_path('purelib')
    with open(os.path.join(target, 'dependencies.pth'), 'w') as stream:
        stream.write(''.join(f'{path}\n' for path in dict.fromkeys([ours, *site.getsitepackages()])))
    return python


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


class JobService:
    """`python -m apache_beam.runners.portability.local_job_service_main` on 127.0.0.1, started
    in `folder` (its current folder, the workers' too) with no PYTHONPATH, and `extra_env` (its
    workers inherit it: a fault point, say)."""

    def __init__(self, folder: str, worker: str, extra_env: dict | None = None):
        self.port = free_port()
        self.worker = worker
        env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'} | (extra_env or {})
        self._log = open(os.path.join(folder, 'job-service.log'), 'w')
        self._process = subprocess.Popen(
            [sys.executable, '-m', 'apache_beam.runners.portability.local_job_service_main',
             f'--port={self.port}'], cwd=folder, env=env, stdout=self._log,
            stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(('127.0.0.1', self.port), timeout=1).close()
                return
            except OSError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f'the job service did not start: {self._log.name}')
                time.sleep(0.1)

    @property
    def endpoint(self) -> str:
        return f'localhost:{self.port}'

    def flags(self) -> list[str]:
        """The flags of a job run by this service's clean workers."""
        return ['--runner=PortableRunner', f'--job_endpoint={self.endpoint}',
                f'--environment_type={SUBPROCESS_WORKERS}',
                f'--environment_config={self.worker} -m apache_beam.runners.worker.sdk_worker_main']

    def failing_flags(self) -> list[str]:
        """The flags of a job this service fails (workers it cannot start)."""
        return ['--runner=PortableRunner', f'--job_endpoint={self.endpoint}',
                '--environment_type=PROCESS', '--environment_config={"command": "/no/such/boot"}']

    def stop(self) -> None:
        """Stops the service, then whatever of its workers is left (a stopped one too)."""
        self._process.terminate()
        try:
            self._process.wait(30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)
        self._log.close()
