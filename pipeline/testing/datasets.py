"""Small datasets for tests and benchmarks: input trees written, converted in this process,
verified in this process, and the edits made to a converted dataset."""
import contextlib
import io
import json
import os
import shutil
import subprocess

from pipeline import job
from pipeline.output import metadata, records
from pipeline.tools import verify

IN_PROCESS = ['--direct_running_mode=in_memory', '--direct_num_workers=1']


def output_files(output_dir: str) -> dict:
    """{relative path: bytes} of everything under a folder."""
    found = {}
    for dirpath, _, names in os.walk(output_dir):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, 'rb') as stream:
                found[os.path.relpath(path, output_dir)] = stream.read()
    return found


def write_tree(root, files: dict) -> str:
    """Writes {relative path: bytes} under root; returns root as str."""
    for relative, data in files.items():
        path = os.path.join(root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'wb') as stream:
            stream.write(data)
    return str(root)


def convert(*argv, config=None, runner_flags=IN_PROCESS) -> dict:
    """A conversion of `argv`, in this process."""
    return job.convert([*argv, *runner_flags], config=config)


def run_verify(path: str) -> subprocess.CompletedProcess:
    """`python -m pipeline.verify PATH --processes=1`, in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = verify.main([path, '--processes=1'])
    return subprocess.CompletedProcess([], code, out.getvalue(), err.getvalue())


def copy_of(dataset: str, folder) -> str:
    """A copy of the dataset folder `dataset` in `folder`, for a test to tamper with."""
    target = os.path.join(folder, 'copy')
    shutil.copytree(dataset, target)
    return target


def edit_json(path: str, edit) -> None:
    """Rewrites the JSON file at `path` as `edit` (given the parsed document) changes it."""
    with open(path) as stream:
        document = json.load(stream)
    edit(document)
    with open(path, 'w') as stream:
        json.dump(document, stream)


def rewrite_summary(output_dir: str, edit) -> None:
    """Rewrites summary.json as `edit` changes it, as the converter writes it (its own digest
    made again): a change consistent with itself, as verify cannot tell from the run's."""
    path = os.path.join(output_dir, metadata.SUMMARY)
    with open(path) as stream:
        summary = json.load(stream)
    edit(summary)
    summary[metadata.SUMMARY_DIGEST] = metadata.summary_digest(summary)
    with open(path, 'wb') as stream:
        stream.write(metadata.dumps(summary))


def read_shard(path: str) -> list[bytes]:
    with open(path, 'rb') as stream:
        return list(records.read_records(stream))


def write_shard(path: str, found: list[bytes]) -> None:
    with open(path, 'wb') as stream:
        stream.write(b''.join(records.frame_record(record) for record in found))


def swap(first: str, second: str) -> None:
    """Swaps the names of two files."""
    os.rename(first, first + '.x')
    os.rename(second, first)
    os.rename(first + '.x', second)
