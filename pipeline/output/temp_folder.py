"""The life of a run's temporary folder, `.tmp-RUN` in the output folder (layout.py): started
with its marker, repaired before a rerun reuses it, removed with its marker last, so that a kill
at any instant leaves it recognisable.

Temporary folders are recognised by their marker, never by their name alone, and a symbolic
link in their place is refused, so `--overwrite` and `--clean_temp` delete only what this tool
wrote. Inside one, an entry of a kind this tool does not make there (wrong_kinds) is removed
before a rerun reuses the folder (repair) and refused before a commit moves from it.

Its key tag (KEY_TAG) says under which key (pipeline/base/resume_key.py) its work was sealed:
work sealed under another key (another user, machine or home) is never reused
(transforms/resume.py says what is).
"""
import contextlib
import dataclasses
import json
import os
import re
import shutil

from pipeline import faults
from pipeline.base import resume_key
from pipeline.base.settings import TEMP_PREFIX, ConversionSettings
from pipeline.errors import DatasetError, printable
from pipeline.io import fileio
from pipeline.io.gcs import list_prefix
from pipeline.output.bounded_reads import NotAFile, as_json, read_file, read_raw
from pipeline.output.layout import (COMMITTED, KEY_TAG, LISTING, MARKER, PARTS, REPLACED, RUN_ID,
                                    RUNNING, SHARDS, WORK_FOLDERS, chunk_of_part, filed_folder,
                                    listed_folder, temp_dir, work_files)


def _is_link(path: str) -> bool:
    return not fileio.is_gcs(path) and os.path.islink(path)


def _kind(entry: os.DirEntry) -> str:
    if entry.is_symlink():
        return 'a symbolic link'
    if entry.is_dir(follow_symlinks=False):
        return 'a folder'
    return 'a file' if entry.is_file(follow_symlinks=False) else 'a special file'


def wrong_kinds(folder: str) -> list[tuple[str, str]]:
    """The entries of a temporary folder (local disk) that are not of the kind this tool makes
    there, as (path, what it is and what belongs there): its subfolders (WORK_FOLDERS, and
    REPLACED) are real folders, what WORK_FOLDERS hold and everything else in it are regular
    files, and nothing is a symbolic link. REPLACED's contents are the old dataset's own
    files, moved aside as they were (links too), and are not looked at."""
    if fileio.is_gcs(folder) or not os.path.isdir(folder) or os.path.islink(folder):
        return []
    found = []
    for entry in _scan(folder):
        belongs = 'a folder' if entry.name in (*WORK_FOLDERS, REPLACED) else 'a file'
        if _kind(entry) != belongs:
            found.append((entry.path, f'{_kind(entry)} where {belongs} belongs'))
        elif entry.name in WORK_FOLDERS:
            found += [(inner.path, f'{_kind(inner)} where a file belongs')
                      for inner in _scan(entry.path) if _kind(inner) != 'a file']
    return sorted(found)


def _scan(folder: str) -> list[os.DirEntry]:
    with os.scandir(folder) as entries:
        return list(entries)


def refuse_wrong_kinds(folder: str) -> None:
    """Raises a DatasetError if a temporary folder is a symbolic link or a file, or holds an
    entry not of the kind this tool makes there (wrong_kinds): what a run writes into, or a
    commit moves from, is then only ever this tool's."""
    if _is_link(folder):
        raise DatasetError(f'{folder} is a symbolic link; this tool keeps its temporary files '
                           'only in a real folder. Remove the link and rerun')
    if not fileio.is_gcs(folder) and os.path.lexists(folder) and not os.path.isdir(folder):
        raise DatasetError(f'{folder} is a file; this tool keeps its temporary files only in a '
                           'folder of that name. Move it away and rerun')
    wrong = wrong_kinds(folder)
    if wrong:
        path, what = wrong[0]
        holds = ('is a symbolic link; a temporary folder of this tool holds none'
                 if what.startswith('a symbolic link') else f'is {what}')
        raise DatasetError(f'{path} {holds}. Remove it and rerun')


def repair(folder: str) -> list[str]:
    """Readies an earlier attempt's temporary folder (local disk) for this one: removes what
    passed data between its stages (LISTED, FILED: no attempt reuses it) and every entry not of
    the kind this tool makes there (wrong_kinds), a link as a link (never followed), so that
    nothing outside the folder is touched. Returns a description per entry of a wrong kind
    removed (its path in the folder, what it was)."""
    wrong = wrong_kinds(folder)
    for path, _ in wrong:
        _remove_entry(path)
    _drop_passing_runs(folder)
    return [f'{printable(os.path.relpath(path, folder))} ({what})' for path, what in wrong]


def _drop_passing_runs(folder: str) -> None:
    """Removes the sorted runs that passed data between a run's stages (LISTED, FILED) and the
    listers' counts (LISTING)."""
    for passing in (listed_folder(folder), filed_folder(folder), fileio.join(folder, LISTING)):
        if fileio.is_gcs(passing):
            fileio.delete_tree(passing)
        elif not os.path.islink(folder):
            _remove_entry(passing)


def _remove_entry(path: str) -> None:
    """Deletes a file, link or folder tree at `path` (local disk; links are not followed)."""
    with fileio.output_errors(path):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)


_PARTIAL = re.compile(r'\.(?:commit\.json|lock|image-tfrecords-run\.json)\.partial-'
                      r'[0-9a-f]{8}(?:[0-9a-f]{24})?\Z')


def remove_partials(output_dir: str, name: str) -> None:
    """Deletes what a kill left of an atomic write of `name` (NAME.partial-HEX) in the folder:
    of a marker here, of the lock (output_lock.py) or the journal (commit_journal.py)."""
    if fileio.is_gcs(output_dir) or not os.path.isdir(output_dir):
        return
    for entry in os.scandir(output_dir):
        if (entry.name.startswith(name + '.partial-') and _PARTIAL.match(entry.name)
                and entry.is_file(follow_symlinks=False)):
            os.remove(entry.path)


@dataclasses.dataclass(frozen=True)
class TempFolder:
    path: str
    run_id: str
    state: str     # RUNNING or COMMITTED


def marker_state(folder: str, run_id: str) -> str | None:
    """The state its marker gives the temporary folder of run `run_id`: None without one."""
    try:
        found = read_raw(fileio.join(folder, MARKER))
    except NotAFile:
        return None
    marker = as_json(found[0]) if found is not None else None
    if (isinstance(marker, dict) and marker.get('run_id') == run_id
            and marker.get('state') in (RUNNING, COMMITTED)):
        return marker['state']
    return None


def write_marker(folder: str, run_id: str, state: str) -> None:
    fileio.write_bytes_atomic(fileio.join(folder, MARKER),
                              json.dumps({'run_id': run_id, 'state': state}).encode())


def found_in(output_dir: str) -> list[TempFolder]:
    """The temporary folders of this tool's runs in `output_dir`: named `.tmp-RUN`, not a
    link, and carrying a marker for RUN. Anything else is not ours and is left alone."""
    if not (fileio.is_gcs(output_dir) or os.path.isdir(output_dir)):
        return []
    found = []
    for entry in fileio.list_dir(output_dir):
        run_id = entry.name[len(TEMP_PREFIX):]
        if (entry.is_dir and entry.name.startswith(TEMP_PREFIX) and RUN_ID.match(run_id)
                and not _is_link(entry.path)):
            state = marker_state(entry.path, run_id)
            if state is not None:
                found.append(TempFolder(entry.path, run_id, state))
    return found


def start(output_dir: str, run_id: str) -> None:
    """Makes sure run `run_id` has its marked temporary folder; refuses a link or a folder of
    that name that this tool did not make (nothing in it is touched)."""
    folder = temp_dir(output_dir, run_id)
    refuse_wrong_kinds(folder)
    state = marker_state(folder, run_id)
    if state is None:
        remove_partials(folder, MARKER)   # A kill while the first marker was written.
    if state is None and _has_files(folder):
        raise DatasetError(f'{folder} exists but was not made by this tool (it has no marker '
                           f'{MARKER}); move it away and rerun')
    if state is None:
        write_marker(folder, run_id, RUNNING)


def _key_tag(settings: ConversionSettings) -> bytes:
    return resume_key.seal(settings.resume_key, f'key of run {settings.run_id}'.encode()).encode()


def tag_key(settings: ConversionSettings) -> None:
    """Notes in the run's temporary folder a tag of the key its work is sealed under (an HMAC
    of the run id: it tells nothing of the key)."""
    fileio.write_bytes_atomic(fileio.join(settings.temp_dir, KEY_TAG), _key_tag(settings))


def under_another_key(settings: ConversionSettings) -> bool:
    """Whether the run's temporary folder was written under another key than this run's (its
    tag differs: another user, machine or home), so that none of its work can be reused."""
    path = fileio.join(settings.temp_dir, KEY_TAG)
    try:
        found = None if fileio.is_untrusted(path) else read_file(path, bounded=True)
    except DatasetError:
        found = None
    return found is not None and found != _key_tag(settings)


def finished_work(temp_dir: str) -> tuple[int, int]:
    """(chunks, shards) that an earlier attempt finished in `temp_dir`."""
    parts = fileio.match(work_files(temp_dir, PARTS, '*.tfrecord.json'))
    shards = fileio.match(work_files(temp_dir, SHARDS, '*.json'))
    return len({chunk_of_part(m.path) for m in parts}), len(shards)


def drop_if_unused(output_dir: str, run_id: str) -> None:
    """Removes a run's temporary folder that holds its marker alone, or with its key's tag (a run
    that failed before it wrote anything but what passed between its stages leaves nothing
    behind)."""
    folder = temp_dir(output_dir, run_id)
    _drop_passing_runs(folder)
    marker, tag = fileio.join(folder, MARKER), fileio.join(folder, KEY_TAG)
    if fileio.is_gcs(folder):
        found = list_prefix(folder)
        if marker in found and set(found) <= {marker, tag}:
            fileio.delete([p for p in found if p != marker] + [marker])
    elif (not _is_link(folder) and os.path.isdir(folder)
          and MARKER in (names := os.listdir(folder)) and set(names) <= {MARKER, KEY_TAG}):
        for name in sorted(names, key=lambda n: n == MARKER):   # The marker last.
            os.remove(os.path.join(folder, name))
        os.rmdir(folder)


def _has_files(folder: str) -> bool:
    if fileio.is_gcs(folder):
        return bool(list_prefix(folder))
    return os.path.isdir(folder) and bool(os.listdir(folder))


def remove(folder: str) -> None:
    """Deletes a temporary folder, its marker last, so a kill leaves it recognisable."""
    marker = fileio.join(folder, MARKER)
    if fileio.is_gcs(folder):
        fileio.delete([p for p in list_prefix(folder) if p != marker])
        faults.crash_point('cleanup:contents')
        fileio.delete([marker] if fileio.exists(marker) else [])
        return
    if not os.path.isdir(folder) or os.path.islink(folder):
        return
    for entry in os.scandir(folder):
        if entry.name == MARKER:
            continue
        _remove_entry(entry.path)
    faults.crash_point('cleanup:contents')
    with contextlib.suppress(FileNotFoundError):
        os.remove(marker)
    faults.crash_point('cleanup:marker')
    with contextlib.suppress(OSError):
        os.rmdir(folder)
