"""Commit: the last step of a run, which puts the finished dataset in place, safely at every
instant, on local disk and Cloud Storage alike (neither can rename a folder atomically).

When the step starts, every new shard is complete in the run's temporary folder, and the run
holds the output lock. The step checks that the lock is still ours, that every input is
accounted for, that the error ratio is acceptable, that the output holds no dataset we were not
told to replace, that every shard file has the size its result says, and that no file a new
name would overwrite belongs to anything but the dataset replaced. Then it writes the new
metadata into the temporary folder and hands the moves to the journal of the output-folder
protocol (pipeline/output/folder.py), which carries them out and cleans up.
"""
import contextlib
import json
import logging
import threading

import apache_beam as beam

from pipeline import faults
from pipeline.base.choices import DamagedAction
from pipeline.io import fileio
from pipeline.output import (bounded_reads, commit_journal, dali_index, dataset_files, layout,
                             metadata, output_lock, shard_formats, temp_folder)
from pipeline.errors import DatasetError
from transforms.labels import DatasetFacts, LabelMap
from transforms import entries, labels
from transforms.copies import found_copies
from transforms.findings import Leakage, check_leakage, collected, damaged_line
from transforms.gathered import gather
from transforms.leakage import filed_chunks
from pipeline.base.settings import ConversionSettings
from transforms.shard_results import ShardResult

LOG = logging.getLogger('image_tfrecords')


class CommitDataset(beam.PTransform):
    """Shard results -> the run summary, once the dataset is in place (see the module
    docstring), in one call on one worker. `plan`: the plan (planning.Plan: the facts and label
    ids); `filed`: the conversion's leakage.Filed (the flat images it counted, the chunks'
    fingerprints that find a copy's source); `checked`: CheckQuality's outputs."""

    def __init__(self, settings: ConversionSettings, plan: beam.PCollection,
                 filed: beam.PCollection, checked: dict):
        super().__init__()
        self._settings, self._plan, self._filed, self._checked = settings, plan, filed, checked

    def expand(self, results: beam.PCollection) -> beam.PCollection:
        found = {name: beam.pvalue.AsList(self._checked[name])
                 for name in ('copies', 'clusters') if name in self._checked}
        if 'spanning' in self._checked:
            found['spanning'] = beam.pvalue.AsSingleton(self._checked['spanning'])
        return gather(results, _commit, beam.pvalue.AsSingleton(self._plan),
                      beam.pvalue.AsList(self._filed), self._settings, name='Put In Place',
                      **found)


def _commit(results: list[ShardResult], plan, filed: list, settings: ConversionSettings,
            copies: list, clusters: list = (), spanning=None) -> dict:
    copies_found = found_copies(copies, settings.temp_dir, filed_chunks(filed),
                                settings.resume_key)
    leakage = collected(clusters, filed, spanning.crowded) if spanning is not None else Leakage()
    return commit_dataset(results, plan.label_map, plan.facts, settings, copies_found, leakage)


def commit_dataset(results: list[ShardResult], label_map: LabelMap, facts: DatasetFacts,
                   settings: ConversionSettings, copies: dict, leakage: Leakage = Leakage()
                   ) -> dict:
    """Puts the new dataset in place (see the module docstring); returns the run summary."""
    out, temp = settings.output_dir, settings.temp_dir
    lock = output_lock.check_lock(out, settings.lock_token)
    by_split = {s: sorted((r for r in results if r.split == s), key=lambda r: r.shard)
                for s in settings.splits}
    errors = {s: sum(r.errors for r in rs) for s, rs in by_split.items()}
    for split, shard_results in by_split.items():
        inputs = facts.split_counts.get(split, 0)
        written = sum(r.records for r in shard_results)
        dropped = sum(len(r.dropped) for r in shard_results)
        if written + errors[split] + dropped != inputs:
            raise RuntimeError(f'{split}: {written} records + {errors[split]} errors + '
                               f'{dropped} dropped copies != {inputs} inputs')
    _check_error_ratio(errors, by_split, facts, settings)
    check_leakage(leakage, settings)
    old = dataset_files.in_folder(out)
    if old and not settings.overwrite:
        raise DatasetError(f'{out} now holds a dataset ({len(old)} files, e.g. {old[0]}) that was '
                           'not there when this run started; nothing was committed. Pass '
                           '--overwrite to replace it')
    _check_shard_files(results, settings)
    temp_folder.start(out, settings.run_id)
    installs, summary = _stage(by_split, errors, label_map, facts, settings,
                               fileio.join(temp, layout.FINAL), copies, leakage)
    dataset_files.refuse_foreign(out, dataset_files.foreign_files(
        out, [target for _, target in installs], old))
    old_first = sorted(old, key=lambda name: name != metadata.DATASET_INFO)
    journal = commit_journal.Journal(settings.run_id, 'replace', tuple(old_first),
                                    tuple(installs)).validate()
    commit_journal.write_journal(out, journal)
    faults.crash_point('commit:journal')
    commit_journal.roll_forward(out, journal)
    LOG.info('dataset committed to %s', out)
    if settings.release_lock:
        output_lock.release(out, settings.lock_token, seen=lock)
    return summary


def _check_shard_files(results: list[ShardResult], settings: ConversionSettings) -> None:
    """Fails, committing nothing, unless every shard file has the size its result says."""
    folder = fileio.join(settings.temp_dir, layout.SHARDS)
    sizes = {e.name: e.size for e in fileio.list_dir(folder)} if results else {}
    for result in (r for r in results if r.records):
        expected = {fileio.basename(layout.in_format(result.temp_path, f)):
                    result.format_bytes.get(f.name)
                    for f in shard_formats.named(settings.output_formats)}
        if settings.dali_index:
            expected[fileio.basename(layout.index_file(result.temp_path))] = \
                result.index_bytes
        for name, size in expected.items():
            if sizes.get(name) != size:
                raise DatasetError(f'{fileio.join(folder, name)} holds {sizes.get(name)} bytes, '
                                   f'not the {size} its {result.records} records take; nothing '
                                   'was committed. Rerun with --clean_temp to convert afresh')


def _stage(by_split: dict, errors: dict, label_map: LabelMap, facts: DatasetFacts,
           settings: ConversionSettings, staged: str, copies: dict,
           leakage: Leakage) -> tuple[list, dict]:
    """Writes the metadata into `staged`; returns the (source in the temporary folder, final
    name) moves and the summary."""
    moves, splits_info, shard_digests = [], {}, {}
    summary = {'dataset': settings.dataset_name, 'run_id': settings.run_id,
               'file_formats': list(settings.output_formats),
               'dali_index': settings.dali_index, 'splits': {}}
    unlisted = labels.unlisted_classes(settings.labels, facts)
    for split, shard_results in by_split.items():
        kept = [r for r in shard_results if r.records]
        for index, result in enumerate(kept):
            for shard_format in shard_formats.named(settings.output_formats):
                source = fileio.basename(layout.in_format(result.temp_path, shard_format))
                target = metadata.shard_name(settings.dataset_name, split, index, len(kept),
                                             shard_format)
                moves.append((f'shards/{source}', target))
                if shard_format.name in result.format_digests:
                    shard_digests[target] = result.format_digests[shard_format.name]
                if settings.dali_index and shard_format == dali_index.FORMAT:
                    moves.append((f'shards/{dali_index.index_path(source)}',
                                  dali_index.index_path(target)))
        class_counts = {text: 0 for text, splits in facts.texts.items() if split in splits}
        class_counts.update((name, 0) for name in unlisted)
        for result in kept:
            for label_id, n in result.label_counts.items():
                name = label_map.names[label_id]
                class_counts[name] = class_counts.get(name, 0) + n
        splits_info[split] = {'shard_lengths': [r.records for r in kept],
                              'num_bytes': sum(r.bytes for r in kept)}
        summary['splits'][split] = {
            'inputs': facts.split_counts.get(split, 0), 'ignored': facts.ignored.get(split, 0),
            'listing': facts.listing_fingerprint(split),
            'records': sum(r.records for r in kept), 'bytes': sum(r.bytes for r in kept),
            'shards': len(kept), 'shard_bytes': [r.bytes for r in kept],
            'shard_first': [r.first_record for r in kept],
            'shard_content': [r.content for r in kept],
            'skipped': errors[split],
            'passed_through': sum(r.passed_through for r in kept),
            'damaged': sum(r.damaged for r in shard_results),
            'dropped_copies': sum(len(r.dropped) for r in shard_results),
            'exact_copies': copies.get(split, {}).get('count', 0),
            'classes': dict(sorted(class_counts.items())),
            'empty_classes': sorted(name for name, n in class_counts.items() if not n),
        }
    summary['copy_examples'] = {split: found['examples'] for split, found in sorted(copies.items())
                                if found['examples']}
    summary['damaged_images'] = DamagedAction(settings.image.damaged_images).value
    summary['leakage'] = leakage.summary(settings.leakage)
    if settings.hashed:
        leakage.write(fileio.join(staged, metadata.LEAKAGE))
        moves.append((f'final/{metadata.LEAKAGE}', metadata.LEAKAGE))
        shard_digests[metadata.LEAKAGE] = bounded_reads.file_sha256(
            fileio.join(staged, metadata.LEAKAGE))
    names = ''.join(name + '\n' for name in label_map.names).encode()
    files = {metadata.LABELS: names, metadata.CLASS_NAMES: names,
             metadata.FEATURES: metadata.dumps(metadata.features_json(
                 len(label_map.names), facts.extras, settings.hashed)),
             **{metadata.error_report_name(split): None for split in by_split},
             **{metadata.damaged_report_name(split): None for split in by_split},
             metadata.DATASET_INFO: metadata.dumps(metadata.dataset_info_json(
                 settings.dataset_name, settings.version, settings.description,
                 shard_formats.named(settings.output_formats), splits_info))}
    # The reports, merged from the shards' entry files straight to the staged folder, and then
    # the other files, each written at once: nothing staged is seen before the journal names it.
    reports = [(split, shard_results, kind, line) for split, shard_results in by_split.items()
               for kind, line in (('errors', _error_line), ('damaged', damaged_line))]
    merging = threading.Lock()
    streamed = dict(fileio.at_once(
        lambda report: _write_report(staged, settings.temp_dir, *report, merging), reports))
    summary['digests'] = dict(sorted({
        **metadata.digests({n: data for n, data in files.items() if data is not None}),
        **streamed, **shard_digests}.items()))
    summary[metadata.SUMMARY_DIGEST] = metadata.summary_digest(summary)
    files = {metadata.SUMMARY: metadata.dumps(summary), **files}
    fileio.at_once(lambda item: fileio.write_bytes(fileio.join(staged, item[0]), item[1]),
                   [(name, data) for name, data in files.items() if data is not None])
    moves += [(f'final/{name}', name) for name in files]
    return moves, summary


def _write_report(folder: str, temp_dir: str, split: str, shard_results: list, kind: str,
                  line, merging: 'threading.Lock | None' = None) -> tuple[str, str]:
    """Writes the split's report of `kind` ('errors', 'damaged') into `folder`, merged from
    its shards' entry files (entries.py); returns its name and SHA-256. A merge holds up to
    entries.FAN_IN files open, so reports written at once merge one at a time (`merging`)."""
    name = (metadata.error_report_name if kind == 'errors' else metadata.damaged_report_name)(split)
    path = fileio.join(folder, name)
    holding = [r for r in shard_results if getattr(r, kind)]
    with merging if holding and merging else contextlib.nullcontext():
        merged = entries.merged([entries.entry_path(r.temp_path, kind) for r in holding],
                                fileio.join(temp_dir, layout.MERGE, name))
        found, digest = entries.write_report(path, merged, lambda e: line(split, e))
    entries.check_count(path, found, sum(getattr(r, kind) for r in holding))
    return name, digest


def _error_line(split: str, entry: tuple) -> bytes:
    source, reason = entry
    return (json.dumps({'split': split, 'source': source, 'reason': reason}) + '\n').encode()


def _check_error_ratio(errors: dict, by_split: dict, facts: DatasetFacts,
                       settings: ConversionSettings) -> None:
    for split, count in errors.items():
        inputs = facts.split_counts.get(split, 0)
        cut = sorted(facts.cut.get(split, ()))
        if cut and settings.max_error_ratio < 1:
            _fail(by_split, split, settings,
                  f'{len(cut)} archive(s) of split {split!r} end in damage, e.g. {cut[0]}: how '
                  'many members lay behind the damage cannot be known, so only '
                  '--max_error_ratio 1 accepts it; nothing was committed. Fetch the archive '
                  'again, or pass --max_error_ratio=1 to convert what it holds')
        if inputs and count > tolerated_errors(inputs, settings):
            _fail(by_split, split, settings,
                  f'{count} of {inputs} inputs of split {split!r} '
                  f'({100 * count / inputs:.1f}%) could not be converted, more than '
                  f'--max_error_ratio {settings.max_error_ratio}; nothing was committed')


def tolerated_errors(inputs: int, settings: ConversionSettings) -> float:
    """How many of a split's inputs may fail: --max_error_ratio of them, and, where the flag was
    left at its default, always a few files of a small split (settings.few_errors, at most a
    tenth of it): a handful of broken files is the normal case, a wrong column or an unreadable
    bucket fails every input."""
    return max(settings.max_error_ratio * inputs, min(settings.few_errors, inputs // 10))


def _fail(by_split: dict, split: str, settings: ConversionSettings, reason: str) -> None:
    """Raises `reason`, with every split's error report written to the temp folder first."""
    for name, shard_results in by_split.items():
        _write_report(settings.temp_dir, settings.temp_dir, name, shard_results, 'errors',
                      _error_line)
    report = fileio.join(settings.temp_dir, metadata.error_report_name(split))
    raise DatasetError(f'{reason}. See {report} for each file and reason')
