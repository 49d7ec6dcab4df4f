"""The commit journal: the moves that replace the old dataset with the new one, rolled forward
after a kill (pipeline/output/folder.py says how)."""
import contextlib
import dataclasses
import json
import os

from pipeline import faults
from pipeline.errors import DatasetError, printable
from pipeline.io import fileio
from pipeline.output import metadata, temp_folder
from pipeline.output.bounded_reads import parse_json, read_file
from pipeline.output.dataset_files import METADATA_NAMES, is_dataset_file, is_temp_shard
from pipeline.output.layout import COMMITTED, REPLACED, check_run_id, temp_dir

JOURNAL = '.commit.json'
MOVE_BATCH = 100


@dataclasses.dataclass(frozen=True)
class Journal:
    """A commit in progress: the old dataset's files (moved into TEMP/replaced/) and the new
    files (from TEMP/<source> to their final names), all names, no paths."""
    run_id: str
    phase: str                                  # 'replace', then 'install'.
    replace: tuple[str, ...]
    install: tuple[tuple[str, str], ...]

    def validate(self) -> 'Journal':
        check_run_id(self.run_id)
        if self.phase not in ('replace', 'install'):
            raise ValueError(f'phase {self.phase!r}')
        for name in self.replace:
            if not is_dataset_file(name):
                raise ValueError(f'{name!r} is not a dataset file name')
        for source, target in self.install:
            staged = source.startswith('final/') and source[len('final/'):] in METADATA_NAMES
            if not (staged or is_temp_shard(source)) or not is_dataset_file(target):
                raise ValueError(f'{source!r} -> {target!r} is not a move of this tool')
        return self


def journal_path(output_dir: str) -> str:
    return fileio.join(output_dir.rstrip('/'), JOURNAL)


def write_journal(output_dir: str, journal: Journal) -> None:
    document = {'run_id': journal.run_id, 'phase': journal.phase,
                'replace': list(journal.replace), 'install': [list(m) for m in journal.install]}
    fileio.write_bytes_atomic(journal_path(output_dir), json.dumps(document, indent=1).encode())


def read_journal(output_dir: str) -> Journal | None:
    """The journal of an interrupted commit, validated; a DatasetError when it is not one this
    tool wrote (then nothing is touched)."""
    path = journal_path(output_dir)
    data = read_file(path, bounded=True)
    if data is None:
        return None
    try:
        document = parse_json(path, data)
        journal = Journal(document['run_id'], document['phase'], tuple(document['replace']),
                          tuple((s, t) for s, t in document['install'])).validate()
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise DatasetError(f'{path} is not a commit journal this tool wrote '
                           f'({printable(str(exc))[:200]}); nothing was done. If no run of this '
                           'tool is committing there, delete it and rerun') from None
    folder = temp_dir(output_dir, journal.run_id)
    temp_folder.refuse_wrong_kinds(folder)
    if temp_folder.marker_state(folder, journal.run_id) is None:
        raise DatasetError(f'{path} is not a commit journal this tool wrote (its temporary '
                           f'folder {folder} has no marker); nothing was done. If no run of this '
                           'tool is committing there, delete it and rerun')
    return journal


def roll_forward(output_dir: str, journal: Journal, recovering: bool = False) -> None:
    """Carries out a commit from its journal's phase to the end (see the module docstring)."""
    out = output_dir.rstrip('/')
    temp = temp_dir(out, journal.run_id)
    with fileio.output_errors(out):
        if journal.phase == 'replace':
            replace = [(fileio.join(out, name), fileio.join(temp, REPLACED, name))
                       for name in journal.replace]
            for number, batch in enumerate(_batches(replace, first=True), 1):
                _move(batch, recovering)
                faults.crash_point(f'commit:replace:{number}')
            journal = dataclasses.replace(journal, phase='install')
            write_journal(out, journal)
        install = [(fileio.join(temp, source), fileio.join(out, target))
                   for source, target in journal.install]
        for number, batch in enumerate(_batches(install, first=False), 1):
            _move(batch, recovering)
            faults.crash_point(f'commit:install:{number}')
        temp_folder.write_marker(temp, journal.run_id, COMMITTED)
        faults.crash_point('commit:marked')
        fileio.delete([journal_path(out)])
        faults.crash_point('commit:unjournaled')
        temp_folder.remove(temp)


def _batches(moves: list, first: bool) -> list[list]:
    """Moves in batches of MOVE_BATCH, the one of dataset_info.json alone: first or last."""
    info = [m for m in moves if fileio.basename(m[0 if first else 1]) == metadata.DATASET_INFO]
    rest = [m for m in moves if m not in info]
    batches = [rest[i:i + MOVE_BATCH] for i in range(0, len(rest), MOVE_BATCH)]
    if info:
        batches = [info, *batches] if first else [*batches, info]
    return batches


def _move(pairs: list, recovering: bool) -> None:
    if recovering:  # Some moves may have happened before the crash.
        pairs = [(s, d) for s, d in pairs if fileio.exists(s)]
    fileio.rename([s for s, _ in pairs], [d for _, d in pairs])


def finish_interrupted(output_dir: str, run_id: str) -> tuple[list[str], set[str]]:
    """Completes what a killed run left half-done (call with the lock held): a commit from its
    journal, the cleanup of temporary folders whose commit finished, and what an atomic write
    left; run `run_id`'s own temporary folder is removed if a cut-off cleanup emptied it.
    Returns a line per thing done and the ids of the runs whose commit is now complete."""
    out = output_dir.rstrip('/')
    lines, finished = [], set()
    journal = read_journal(out)
    if journal is not None:
        roll_forward(out, journal, recovering=True)
        lines.append(f'completed the interrupted commit of run {journal.run_id} in {out}: it '
                     'holds that run\'s dataset now')
        finished.add(journal.run_id)
    temp_folder.remove_partials(out, JOURNAL)
    for folder in temp_folder.found_in(out):
        if folder.state == COMMITTED:
            temp_folder.remove(folder.path)
            lines.append(f'removed the temporary folder {folder.path} of run {folder.run_id}, '
                         'whose commit had finished')
            finished.add(folder.run_id)
    own = temp_dir(out, run_id)
    if not fileio.is_gcs(own) and not os.path.islink(own) and os.path.isdir(own):
        with contextlib.suppress(OSError):
            os.rmdir(own)   # Only if empty.
    return lines, finished


def finish_stopped(output_dir: str, run_id: str) -> bool:
    """Completes the commit of run `run_id` that a stop cut short (call with the lock held once
    no worker of the run is left): a commit begins when its journal is written, and from then
    on it is the run's outcome, whatever stops it. Returns whether there was one; a journal
    that cannot be read is left to the next run (which says why)."""
    try:
        journal = read_journal(output_dir)
    except DatasetError:
        return False
    if journal is None or journal.run_id != run_id:
        return False
    roll_forward(output_dir, journal, recovering=True)
    return True
