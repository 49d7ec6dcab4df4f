"""Commit: the last step of a run, which makes the finished dataset visible in one go.

Shards are written under a temporary folder inside the output prefix. Only when every shard is
written and the error ratio is acceptable are old dataset files removed (with --overwrite), the
shards moved to their final TFDS names (empty ones dropped, the rest numbered), and the
metadata written, `dataset_info.json` last. A run that fails before this step leaves no
final-named shard; one that fails the error-ratio check leaves only its error reports, in the
temporary folder, and the previous dataset (if any) untouched.
"""
import json

from transforms import fileio, metadata
from transforms.errors import DatasetError
from transforms.labels import DatasetFacts, LabelMap
from transforms.settings import ConversionSettings
from transforms.write_shards import LOG, ShardResult

DATASET_FILE_PATTERNS = ('*.tfrecord-*', metadata.DATASET_INFO, metadata.FEATURES, metadata.LABELS,
                         metadata.CLASS_NAMES, metadata.SUMMARY, 'errors-*.jsonl')


def existing_dataset_files(output_dir: str) -> list[str]:
    """Files of an earlier dataset directly under `output_dir` (never the temp folders)."""
    found = set()
    for pattern in DATASET_FILE_PATTERNS:
        found.update(m.path for m in fileio.match(fileio.join(output_dir, pattern))
                     if fileio.dirname(m.path).rstrip('/') == output_dir.rstrip('/'))
    return sorted(found)


def commit_dataset(results: list[ShardResult], label_map: LabelMap, facts: DatasetFacts,
                   settings: ConversionSettings) -> dict:
    """Moves the shards into place and writes the metadata; returns the run summary."""
    out = settings.output_dir
    by_split = {s: sorted((r for r in results if r.split == s), key=lambda r: r.shard)
                for s in settings.splits}
    errors = {s: sorted(e for r in rs for e in r.errors) for s, rs in by_split.items()}
    for split, shard_results in by_split.items():
        inputs = facts.split_counts.get(split, 0)
        written = sum(r.records for r in shard_results)
        if written + len(errors[split]) != inputs:
            raise RuntimeError(f'{split}: {written} records + {len(errors[split])} errors '
                               f'!= {inputs} inputs')
    _check_error_ratio(errors, facts, settings)

    fileio.delete(existing_dataset_files(out))
    splits_info, summary = {}, {'dataset': settings.dataset_name, 'splits': {}}
    sources, destinations = [], []
    for split, shard_results in by_split.items():
        kept = [r for r in shard_results if r.records]
        for index, result in enumerate(kept):
            sources.append(result.temp_path)
            destinations.append(fileio.join(out, metadata.shard_name(
                settings.dataset_name, split, index, len(kept))))
        class_counts = {}
        for result in kept:
            for label_id, n in result.label_counts.items():
                class_counts[label_id] = class_counts.get(label_id, 0) + n
        splits_info[split] = {'shard_lengths': [r.records for r in kept],
                              'num_bytes': sum(r.bytes for r in kept)}
        summary['splits'][split] = {
            'records': sum(r.records for r in kept), 'bytes': sum(r.bytes for r in kept),
            'shards': len(kept), 'skipped': len(errors[split]),
            'passed_through': sum(r.passed_through for r in kept),
            'classes': {label_map.names[i]: n for i, n in sorted(class_counts.items())},
        }
    fileio.rename(sources, destinations)
    _write_error_reports(out, errors)
    _write_metadata(out, label_map, facts, settings, splits_info, summary)
    fileio.delete_tree(settings.temp_dir)
    LOG.info('dataset committed to %s', out)
    return summary


def _write_error_reports(out: str, errors: dict) -> None:
    for split, entries in errors.items():
        lines = ''.join(json.dumps({'split': split, 'source': source, 'reason': reason}) + '\n'
                        for source, reason in entries)
        fileio.write_bytes(fileio.join(out, metadata.error_report_name(split)), lines.encode())


def _check_error_ratio(errors: dict, facts: DatasetFacts, settings: ConversionSettings) -> None:
    for split, entries in errors.items():
        inputs = facts.split_counts.get(split, 0)
        if inputs and len(entries) / inputs > settings.max_error_ratio:
            fileio.delete_tree(settings.temp_dir)
            _write_error_reports(settings.temp_dir, errors)
            report = fileio.join(settings.temp_dir, metadata.error_report_name(split))
            raise DatasetError(
                f'{len(entries)} of {inputs} inputs of split {split!r} '
                f'({100 * len(entries) / inputs:.1f}%) could not be converted, more than '
                f'--max_error_ratio {settings.max_error_ratio}; nothing was committed. '
                f'See {report} for each file and reason')


def _write_metadata(out: str, label_map: LabelMap, facts: DatasetFacts,
                    settings: ConversionSettings, splits_info: dict, summary: dict) -> None:
    names = ''.join(name + '\n' for name in label_map.names).encode()
    fileio.write_bytes(fileio.join(out, metadata.LABELS), names)
    fileio.write_bytes(fileio.join(out, metadata.CLASS_NAMES), names)
    fileio.write_bytes(fileio.join(out, metadata.FEATURES), metadata.dumps(
        metadata.features_json(len(label_map.names), facts.extras)))
    fileio.write_bytes(fileio.join(out, metadata.SUMMARY), metadata.dumps(summary))
    fileio.write_bytes(fileio.join(out, metadata.DATASET_INFO), metadata.dumps(
        metadata.dataset_info_json(settings.dataset_name, settings.version, settings.description,
                                   splits_info)))
