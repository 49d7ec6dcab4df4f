"""Running the command line (`python -m pipeline.run`) in a subprocess, for the tests."""
import subprocess
import sys


def run_cli(*argv, cwd=None, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-m', 'pipeline.run', *argv], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=timeout)


def start_cli(*argv, env=None) -> subprocess.Popen:
    """Starts the command line in its own process group (as a shell starts a job)."""
    return subprocess.Popen([sys.executable, '-m', 'pipeline.run', *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
