"""verify's command line run in this process, and the edits the tests make to a dataset."""
import contextlib
import io
import json
import os
import shutil
import subprocess

from pipeline.output import records
from pipeline.tools import verify


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
