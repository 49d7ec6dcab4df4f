"""What the output folder holds when a run starts, and what the run does about it: it finishes
a commit a killed run left half-done, finds that the folder holds this very command's dataset
already (nothing to do), refuses a dataset it is not told to replace and files that belong to
no dataset, and says what unfinished runs left there, removing it as the flags ask (the
protocol: pipeline/output/output_folder.py).
"""
import logging
import os
from typing import Callable

from pipeline.base.settings import ConversionSettings
from pipeline.base.splits import SPLITS
from pipeline.errors import DatasetError
from pipeline.io import fileio
from pipeline.output import bounded_reads, commit_journal, metadata, output_folder
from transforms import resume

LOG = logging.getLogger('image_tfrecords')


def nothing_to_do(settings: ConversionSettings, listed_now: Callable[[], dict] | None) -> bool:
    """Finishes what a killed run left half-done; True when the output then holds this very
    run's dataset (a commit of this run was interrupted, or the same command ran before on the
    same input and --overwrite does not ask to convert again). `listed_now`: the plan document
    of the input as it is now, to tell whether it changed (None where listing it again would
    cost a job: the input is then taken as unchanged)."""
    out = settings.output_dir
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
    if not ours or settings.overwrite or not output_folder.dataset_files(out):
        return False
    if listed_now is None:
        LOG.warning('%s already holds the dataset of this command (run %s); nothing to do. '
                    'The input was not listed again: pass --overwrite to convert again after '
                    'it changed', out, settings.run_id)
        return True
    changes = input_changes(summary, listed_now)
    if changes:
        raise DatasetError(f'{out} holds the dataset of this command, but its input changed '
                           f'since ({"; ".join(changes)}); pass --overwrite to convert again')
    LOG.warning('%s already holds the dataset of this command (run %s) and its input is '
                'unchanged; nothing to do', out, settings.run_id)
    return True


def input_changes(summary: dict, listed_now: Callable[[], dict]) -> list[str]:
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


def check_existing(settings: ConversionSettings) -> None:
    """Refuses a dataset that is not to be replaced, and files that a new dataset's metadata
    would overwrite but that belong to no dataset."""
    out = settings.output_dir
    with fileio.listing_once():   # Both look at the output folder, which nothing changes here.
        existing = output_folder.dataset_files(out)
        if existing and not settings.overwrite:
            raise DatasetError(f'{out} already holds a dataset ({len(existing)} files, e.g. '
                               f'{existing[0]}); pass --overwrite to replace it or choose another '
                               '--output_dir')
        output_folder.refuse_foreign(out, output_folder.foreign_files(
            out, output_folder.metadata_names(settings.splits), existing))


def check_not_inside_input(output_dir: str, input_dir: str | None) -> None:
    """Refuses an output folder inside the input folder (the next run would list it)."""
    if not input_dir:
        return
    if fileio.is_gcs(output_dir) != fileio.is_gcs(input_dir):
        return
    out, root = ((p.rstrip('/') + '/' for p in (output_dir, input_dir)) if fileio.is_gcs(output_dir)
                 else (os.path.realpath(p) + os.sep for p in (output_dir, input_dir)))
    if out.startswith(root):
        raise DatasetError(f'--output_dir {output_dir} is inside --input_dir {input_dir}; the '
                           'next run would read the dataset as input. Choose an output folder '
                           'outside the input')


def clear_temp_folders(settings: ConversionSettings, clean_temp: bool) -> bool:
    """Says what unfinished runs left in the output and removes it as the flags ask: other
    runs' temporary folders with --overwrite or --clean_temp, this run's own (its resume state)
    with --clean_temp. Only folders this tool marked as its own are ever removed. Returns
    whether this run can reuse earlier work."""
    folders = output_folder.temp_folders(settings.output_dir)
    ours = [f for f in folders if f.run_id == settings.run_id]
    others = [f for f in folders if f.run_id != settings.run_id]
    removed = folders if clean_temp else others if settings.overwrite else []
    if removed:
        sizes = _sizes(removed)
        for folder in removed:
            output_folder.remove_temp(folder.path)
        LOG.warning('removed temporary folders of unfinished runs: %s', sizes)
    kept_others = [f for f in others if f not in removed]
    if kept_others:
        LOG.warning('%s holds temporary folders of runs with other options: %s; --clean_temp '
                    'removes them', settings.output_dir, _sizes(kept_others))
    if not ours or ours[0] in removed:
        return False
    repaired = output_folder.repair_temp(settings.temp_dir)
    if repaired:
        LOG.warning('removed from %s what this tool does not make there: %s',
                    settings.temp_dir, ', '.join(repaired[:5]) + (
                        f' and {len(repaired) - 5} more' if len(repaired) > 5 else ''))
    if resume.under_another_key(settings):
        LOG.warning("resuming run %s: its earlier attempt's work was written under another key; "
                    'converting it again', settings.run_id)
        output_folder.remove_temp(settings.temp_dir)
        return False
    chunks, shards = resume.finished_work(settings.temp_dir)
    LOG.warning('resuming run %s: an earlier attempt finished %d chunks and %d shards; each is '
                'reused if its inputs are unchanged, else converted again', settings.run_id,
                chunks, shards)
    return True


def _sizes(folders: list[output_folder.TempFolder]) -> str:
    return ', '.join(f'{fileio.basename(f.path)} ({fileio.tree_bytes(f.path) / 1e6:.1f} MB)'
                     for f in folders)
