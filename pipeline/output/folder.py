"""The output folder's protocol as one object, OutputFolder: one writer at a time, each run's
temporary folder, the commit journal, and what counts as the dataset in the folder, recoverable
after a kill at any instant. The launcher (pipeline/job.py) checks the folder, locks it, starts
the run's temporary folder and releases the lock through it; the commit runs in the pipeline's
Commit stage on workers (transforms/commit.py), with the modules this object calls.

Everything lives directly in OUTPUT:

    .lock                     who writes the folder now (JSON: token, run id, host, pid, ...)
    .commit.json              the journal of a commit in progress: run id, phase, file names
    .tmp-RUN/                 the temporary folder of run RUN, and its work (layout.py)

**Confinement.** Every path the protocol touches is derived from OUTPUT and names it validates:
a run id is 16 hex digits, a dataset file is a shard name (or a TFRecord shard's DALI index,
SHARD.idx) or one of the metadata names (dataset_files.py), a file in a temporary folder is a
shard (or its index) or a staged metadata file. Nothing is ever read from a file as a path, so
no file in the folder, whoever wrote it, can make a run move or delete anything outside OUTPUT.
A journal or lock that breaks these rules is refused in one line and touches nothing.
Temporary folders are recognised by their marker, never by their name alone (temp_folder.py).

**The lock** (output_lock.py). Taking it is exclusive whether the lock is absent or stale.
Locally every change of `.lock` (create, take over, release) happens under an advisory lock
(flock) of the output folder itself, held only for that moment and dropped by the kernel if the
process dies; on Cloud Storage every change is conditional on the generation read (create: no
object yet; take over: still the stale holder's; release: still ours). A holder is stale when it
is provably gone: a run on this machine (same host name, boot and PID namespace) whose process
no longer exists, is a zombie, or is another process with the same pid (its start time
differs), or a lock older than STALE_UNREADABLE_SECONDS that is empty or unreadable. Anything
else (another host or container, a host restarted since, a Dataflow job) needs `--break_lock`.

**The commit** (transforms/commit.py calls it; commit_journal.py): the new shards and metadata
are complete in the temporary folder, then the journal lists the old dataset's file names
(moved aside into `.tmp-RUN/replaced/`) and the new files' names (moved in),
`dataset_info.json` moved away first and in last. After the moves the marker says `committed`,
then the journal is deleted, then the temporary folder with the marker last. A kill at any
instant leaves a journal (the next run rolls it forward: every move can be repeated) or a
committed marker (the next run finishes the cleanup); the folder holds the complete old dataset
or the complete new one.

The parts: layout.py (names and paths), temp_folder.py (a run's temporary folder), dataset_files.py
(what counts as the dataset), output_lock.py (the lock), commit_journal.py (the commit's moves
and their recovery), bounded_reads.py (what the folder's files are read with).

When a run starts (`start`), it finishes a commit a killed run left half-done, finds that the
folder holds this very command's dataset already (nothing to do), refuses a dataset it is not
told to replace and files that belong to no dataset, and says what unfinished runs left there,
removing it as the flags ask.
"""
import dataclasses
import logging
import os
from typing import Callable

from pipeline.base.settings import ConversionSettings
from pipeline.base.splits import SPLITS
from pipeline.errors import DatasetError
from pipeline.io import fileio
from pipeline.output import (bounded_reads, commit_journal, dataset_files, layout, metadata,
                             output_lock, temp_folder)

LOG = logging.getLogger('image_tfrecords')


@dataclasses.dataclass(frozen=True)
class OutputFolder:
    """The output folder `path` (a local folder or gs://bucket/prefix, without a final '/')."""
    path: str

    def check(self) -> None:
        """Raises a DatasetError when the folder cannot be an output folder: a file, or below a
        file. (A name with glob characters, which listing would read as a pattern, is refused
        before: pipeline/launch.py.)"""
        if fileio.is_gcs(self.path):
            return
        path = os.path.abspath(self.path)
        while not os.path.lexists(path):
            path = os.path.dirname(path)
        if not os.path.isdir(path):
            below = '' if path == os.path.abspath(self.path) else f' ({path} is a file)'
            raise DatasetError(f'--output_dir {self.path} is not a folder{below}; choose a folder')

    def check_outside(self, input_dir: str | None) -> None:
        """Refuses an output folder inside the input folder (the next run would list it)."""
        if not input_dir:
            return
        if fileio.is_gcs(self.path) != fileio.is_gcs(input_dir):
            return
        out, root = ((p.rstrip('/') + '/' for p in (self.path, input_dir))
                     if fileio.is_gcs(self.path)
                     else (os.path.realpath(p) + os.sep for p in (self.path, input_dir)))
        if out.startswith(root):
            raise DatasetError(f'--output_dir {self.path} is inside --input_dir {input_dir}; the '
                               'next run would read the dataset as input. Choose an output folder '
                               'outside the input')

    def lock(self, run_id: str, runner: str, waits: bool, break_lock: bool,
             job_ended: Callable[[dict], bool]) -> str:
        """Takes the folder's lock for run `run_id` (output_lock.acquire); returns its token."""
        return output_lock.acquire(self.path, run_id, runner, waits, break_lock, job_ended)

    def read_lock(self) -> output_lock.LockState | None:
        return output_lock.read_lock(self.path)

    def check_lock(self, token: str) -> output_lock.LockState:
        """The lock, checked to be still `token`'s."""
        return output_lock.check_lock(self.path, token)

    def name_job(self, token: str, job: dict) -> bool:
        """Names in the lock the job that a service runs for the lock's holder."""
        return output_lock.name_job(self.path, token, job)

    def release(self, token: str, seen: output_lock.LockState | None = None) -> None:
        output_lock.release(self.path, token, seen=seen)

    def temp_dir(self, run_id: str) -> str:
        return layout.temp_dir(self.path, run_id)

    def dataset_files(self) -> list[str]:
        """The files of this tool's dataset in the folder (dataset_files.in_folder)."""
        return dataset_files.in_folder(self.path)

    def start(self, settings: ConversionSettings, listed_now: Callable[[], dict] | None,
              clean_temp: bool) -> ConversionSettings | None:
        """Readies the folder for run `settings` (call with its lock held): finishes what killed
        runs left, checks what it holds, removes what unfinished runs left as the flags ask, and
        starts the run's temporary folder. Returns the settings with `resuming` (whether this run
        reuses an earlier attempt's work), or None when the folder holds this run's dataset
        already (see _nothing_to_do, with `listed_now`)."""
        if self._nothing_to_do(settings, listed_now):
            return None
        self._check_existing(settings)
        settings = dataclasses.replace(
            settings, resuming=self._clear_temp_folders(settings, clean_temp))
        temp_folder.start(self.path, settings.run_id)
        temp_folder.tag_key(settings)
        return settings

    def finish_stopped(self, run_id: str) -> bool:
        """Completes the commit of run `run_id` that a stop cut short (commit_journal.py)."""
        return commit_journal.finish_stopped(self.path, run_id)

    def drop_if_unused(self, run_id: str) -> None:
        """Removes the temporary folder of run `run_id` if nothing in it can be reused."""
        temp_folder.drop_if_unused(self.path, run_id)

    def _nothing_to_do(self, settings: ConversionSettings,
                       listed_now: Callable[[], dict] | None) -> bool:
        """Finishes what a killed run left half-done; True when the output then holds this very
        run's dataset (a commit of this run was interrupted, or the same command ran before on
        the same input and --overwrite does not ask to convert again). `listed_now`: the plan
        document of the input as it is now, to tell whether it changed (None where listing it
        again would cost a job: the input is then taken as unchanged)."""
        out = self.path
        lines, finished = commit_journal.finish_interrupted(out, settings.run_id)
        for line in lines:
            LOG.warning('%s', line)
        if settings.run_id in finished:
            return True
        summary, info = (found or {} for found in bounded_reads.read_metadata_files(
            out, metadata.SUMMARY, metadata.DATASET_INFO))
        ours = (summary.get('run_id') == settings.run_id
                and (info.get('description'), info.get('version')) == (settings.description,
                                                                      settings.version))
        if not ours or settings.overwrite or not self.dataset_files():
            return False
        if listed_now is None:
            LOG.warning('%s already holds the dataset of this command (run %s); nothing to do. '
                        'The input was not listed again: pass --overwrite to convert again after '
                        'it changed', out, settings.run_id)
            return True
        changes = _input_changes(summary, listed_now)
        if changes:
            raise DatasetError(f'{out} holds the dataset of this command, but its input changed '
                               f'since ({"; ".join(changes)}); pass --overwrite to convert again')
        LOG.warning('%s already holds the dataset of this command (run %s) and its input is '
                    'unchanged; nothing to do', out, settings.run_id)
        return True

    def _check_existing(self, settings: ConversionSettings) -> None:
        """Refuses a dataset that is not to be replaced, and files that a new dataset's metadata
        would overwrite but that belong to no dataset."""
        out = self.path
        with fileio.listing_once():   # Both look at the output folder, which nothing changes here.
            existing = self.dataset_files()
            if existing and not settings.overwrite:
                raise DatasetError(f'{out} already holds a dataset ({len(existing)} files, e.g. '
                                   f'{existing[0]}); pass --overwrite to replace it or choose '
                                   'another --output_dir')
            dataset_files.refuse_foreign(out, dataset_files.foreign_files(
                out, dataset_files.metadata_names(settings.splits), existing))

    def _clear_temp_folders(self, settings: ConversionSettings, clean_temp: bool) -> bool:
        """Says what unfinished runs left in the output and removes it as the flags ask: other
        runs' temporary folders with --overwrite or --clean_temp, this run's own (its resume
        state) with --clean_temp. Only folders this tool marked as its own are ever removed.
        Returns whether this run can reuse earlier work."""
        folders = temp_folder.found_in(self.path)
        ours = [f for f in folders if f.run_id == settings.run_id]
        others = [f for f in folders if f.run_id != settings.run_id]
        removed = folders if clean_temp else others if settings.overwrite else []
        if removed:
            sizes = _sizes(removed)
            for folder in removed:
                temp_folder.remove(folder.path)
            LOG.warning('removed temporary folders of unfinished runs: %s', sizes)
        kept_others = [f for f in others if f not in removed]
        if kept_others:
            LOG.warning('%s holds temporary folders of runs with other options: %s; --clean_temp '
                        'removes them', self.path, _sizes(kept_others))
        if not ours or ours[0] in removed:
            return False
        repaired = temp_folder.repair(settings.temp_dir)
        if repaired:
            LOG.warning('removed from %s what this tool does not make there: %s',
                        settings.temp_dir, ', '.join(repaired[:5]) + (
                            f' and {len(repaired) - 5} more' if len(repaired) > 5 else ''))
        if temp_folder.under_another_key(settings):
            LOG.warning("resuming run %s: its earlier attempt's work was written under another "
                        'key; converting it again', settings.run_id)
            temp_folder.remove(settings.temp_dir)
            return False
        chunks, shards = temp_folder.finished_work(settings.temp_dir)
        LOG.warning('resuming run %s: an earlier attempt finished %d chunks and %d shards; each '
                    'is reused if its inputs are unchanged, else converted again', settings.run_id,
                    chunks, shards)
        return True


def _input_changes(summary: dict, listed_now: Callable[[], dict]) -> list[str]:
    """How the input listed now differs from the one `summary` records, per split, by count
    and by listing fingerprint (names, sizes and labels; see refs.listing_hash). Empty for a
    dataset written without fingerprints."""
    then = summary.get('splits', {})
    if not all('listing' in s for s in then.values()):
        return []
    now = listed_now()['splits']
    changes = []
    for split in SPLITS:
        old, new = then.get(split), now.get(split)
        if old is None and new is None:
            continue
        count_now, count_then = (new or {}).get('inputs', 0), (old or {}).get('inputs', 0)
        if count_now != count_then:
            changes.append(f'{split}: {count_now} inputs now, {count_then} then')
        elif (new or {}).get('listing') != (old or {}).get('listing'):
            changes.append(f'{split}: {count_now} inputs as then, but other names, sizes or labels')
    return changes


def _sizes(folders: list[temp_folder.TempFolder]) -> str:
    return ', '.join(f'{fileio.basename(f.path)} ({fileio.tree_bytes(f.path) / 1e6:.1f} MB)'
                     for f in folders)
