"""What `verify` checks of the files beside the shards, against what the records hold and what
the run noted in summary.json: that summary.json is this dataset's (pipeline/output/
dataset_files.is_own_dataset; else one line saying why) with its file formats, and agrees with
the records (per split: records, shards, bytes, each shard's bytes and content (its first record
before shard_content), records per class, inputs accounted for, passed-through records within
its records) and with the error and damage reports (a line per input it counts, read a line at a
time; each damaged entry's action is summary.json's damaged_images); that TFDS's class-names
file holds labels.txt's names in their order; that features.json describes each record key as
this tool does, with the type the records hold; and (digest_problems) that summary.json has the
SHA-256 it notes of itself and every file verify cannot rebuild from the records the SHA-256
it notes in `digests`, a missing digest being a problem too. A shard verify could not read to
its end is left out of the checks of its bytes and content, and the counts of its split that
disagree are counted, not named (verify sums them in that shard's line); any other problem of
it is not. Copies, damaged JPEGs kept and leakage.jsonl are checked apart (quality_checks.py,
leakage_checks.py).
"""
import collections

from pipeline.errors import printable
from pipeline.io import fileio
from pipeline.output import (bounded_reads, dataset_files, layout, metadata, records,
                             shard_formats)

_KINDS = {'int64': 'int', 'float32': 'float', 'string': 'bytes'}


def shown(value, limit: int = 60) -> str:
    """A value read from a file as a problem line shows it: its repr, escaped, at most `limit`
    characters."""
    text = printable(repr(value))
    return text if len(text) <= limit else text[:limit - 3] + '...'


def note_kinds(kinds: dict[str, str | None], example: dict) -> None:
    """Notes in `kinds` the type of each feature of a decoded record: 'int', 'float' or
    'bytes' (None while the feature was only seen empty)."""
    for key, values in example.items():
        if values:
            kinds[key] = ('int' if isinstance(values[0], int) else
                          'float' if isinstance(values[0], float) else 'bytes')
        else:
            kinds.setdefault(key, None)


def _feature_kind(entry) -> str | None:
    """The value type a features.json entry declares, None when it is none of this tool's."""
    if isinstance(entry, dict) and isinstance(entry.get('sequence'), dict):
        entry = entry['sequence'].get('feature')
    if not isinstance(entry, dict):
        return None
    name = str(entry.get('pythonClassName', ''))
    if name.endswith(('text_feature.Text', 'image_feature.Image')):
        return 'bytes'
    if name.endswith('class_label_feature.ClassLabel'):
        return 'int'
    tensor = entry.get('tensor')
    return _KINDS.get(str(tensor.get('dtype'))) if isinstance(tensor, dict) else None


def _features_problems(output_dir: str, num_classes: int, kinds: dict[str, str]) -> list[str]:
    document = bounded_reads.load_metadata(output_dir, metadata.FEATURES)
    try:
        features = document['featuresDict']['features']
    except (TypeError, KeyError):
        features = None
    if not isinstance(features, dict):
        return [f'{metadata.FEATURES}: missing or not the TFDS features of this tool']
    ours = metadata.features_json(num_classes, {})['featuresDict']['features']
    problems = []
    for key, entry in sorted(features.items()):
        declared = _feature_kind(entry)
        if key in ours and entry != ours[key]:
            problems.append(f'{metadata.FEATURES}: {key} is not described as this tool '
                            f'describes it ({records.IMAGE_FEATURES[key]})')
        elif kinds.get(key) and declared != kinds[key]:
            problems.append(f'{metadata.FEATURES}: {key} is declared {declared or "unknown"}, '
                            f'the records hold {kinds[key]} values')
    missing, unheld = sorted(set(kinds) - set(features)), sorted(set(features) - set(kinds))
    if missing:
        problems.append(f'{metadata.FEATURES}: does not describe {", ".join(missing)}, which '
                        'the records hold')
    if kinds and unheld:
        problems.append(f'{metadata.FEATURES}: describes {", ".join(map(str, unheld))}, which '
                        'no record holds')
    return problems


def _labels_problems(output_dir: str, labels: bytes) -> list[str]:
    problems = []
    for name in (metadata.CLASS_NAMES, metadata.OLD_CLASS_NAMES):
        found = bounded_reads.read_file(fileio.join(output_dir, name), bounded=True)
        if found is not None and found != labels:
            problems.append(f'{name}: not the class names of {metadata.LABELS} in their order; '
                            'TFDS would name the labels wrongly')
    return problems


def _report_lines(output_dir: str, name: str, split: str, noted: int | None,
                  action: str | None = None) -> int | str:
    """The number of entries of a split's error or damage report, or what is wrong with it
    (an entry whose action is not `action`, where given); read a line at a time, stopping at
    the first bad line or past `noted` entries."""
    lines = bounded_reads.jsonl_lines(fileio.join(output_dir, name))
    if lines is None:
        return 'missing'
    count = 0
    for number, entry in lines:
        if not isinstance(entry, dict) or entry.get('split') != split or 'source' not in entry:
            return f'line {number} is not an entry of split {split!r}'
        if action is not None and entry.get('action', action) != action:
            return (f'line {number} says {shown(entry["action"])}, '
                    f'{metadata.SUMMARY} says --damaged_images={printable(str(action))[:40]}')
        count = number
        if noted is not None and count > noted:
            return f'more than {noted} entries, {metadata.SUMMARY} says {noted}'
    return count


def _split_problems(output_dir: str, split: str, noted: dict, info_split: dict,
                    shards: list, damaged_images: str | None) -> list[str]:
    """summary.json's facts of one split against dataset_info.json, the split's shards (each
    verify's report of a shard: their bytes and content) and its error and damage reports."""
    facts = {'shards': len(shards), 'bytes': int(info_split['numBytes'])}
    problems = [f'{metadata.SUMMARY}: {split} has {shown(noted.get(key))} {key}, the dataset '
                f'has {value}' for key, value in facts.items() if noted.get(key) != value]
    sizes = noted.get('shard_bytes', [r.bytes for r in shards])
    firsts = noted.get('shard_first', [''] * len(shards))   # Datasets of earlier versions: ''.
    contents = noted.get('shard_content', [''] * len(shards))
    for report, noted_bytes, first, content in zip(shards, sizes, firsts, contents):
        where = f'{split} shard {report.index} ({report.name})'
        if not report.complete:   # Its bytes and content are not known.
            continue
        if report.bytes != noted_bytes:
            problems.append(f'{where}: {report.bytes} bytes, {metadata.SUMMARY} says '
                            f'{shown(noted_bytes)} (shards swapped or replaced?)')
        elif content and report.content != content:
            problems.append(f'{where}: its records are not those the run wrote there, in that '
                            f'order ({metadata.SUMMARY}: shards swapped, records reordered or '
                            'replaced?)')
        elif not content and first and report.first != first:
            problems.append(f'{where}: its first record is not the one the run wrote there '
                            f'({metadata.SUMMARY}: shards swapped or replaced?)')
    for name, key, action in ((metadata.error_report_name(split), 'skipped', None),
                              (metadata.damaged_report_name(split), 'damaged', damaged_images)):
        lines = _report_lines(output_dir, name, split,
                              noted[key] if isinstance(noted.get(key), int) else None, action)
        if lines == 'missing' and key not in noted:   # Written before this report existed.
            continue
        if isinstance(lines, str):
            problems.append(f'{name}: {lines}')
        elif key in noted and lines != noted[key]:
            problems.append(f'{name}: {lines} entries, {metadata.SUMMARY} says '
                            f'{shown(noted[key])} {key} inputs')
    return problems


def _count_problems(split: str, noted: dict, shards: list) -> list[str]:
    """summary.json's counts of one split that its records give (records, per class, passed
    through, inputs accounted for) against those of its shards (verify's reports)."""
    records_total = sum(r.records for r in shards)
    problems = [] if noted.get('records') == records_total else [
        f'{metadata.SUMMARY}: {split} has {shown(noted.get("records"))} records, the dataset '
        f'has {records_total}']
    classes = collections.Counter()
    for report in shards:
        classes.update(report.classes)
    if {c: n for c, n in noted.get('classes', {}).items() if n} != classes:
        problems.append(f'{metadata.SUMMARY}: the records per class of {split} are not those '
                        'of its shards')
    empty = sorted(c for c, n in noted.get('classes', {}).items() if not n)
    if noted.get('empty_classes', empty) != empty:
        problems.append(f'{metadata.SUMMARY}: {split} has empty_classes '
                        f'{shown(noted["empty_classes"])}, its classes without records are '
                        f'{shown(empty)}')
    passed = noted.get('passed_through', 0)
    if not isinstance(passed, int) or not 0 <= passed <= records_total:
        problems.append(f'{metadata.SUMMARY}: {split} has {shown(passed)} passed_through, not a '
                        f'count of its {records_total} records')
    accounted = records_total + noted.get('skipped', 0) + noted.get('dropped_copies', 0)
    if noted.get('inputs') != accounted:
        problems.append(f'{metadata.SUMMARY}: {split} has {shown(noted.get("inputs"))} inputs, '
                        f'but {accounted} records, skipped inputs and dropped copies')
    return problems


def digest_problems(output_dir: str, summary: dict, present: list[str],
                    reported: set[str]) -> list[str]:
    """summary.json's own digest, and each of the `present` files (files of the dataset that
    verify cannot rebuild from the records) whose SHA-256 summary.json does not note or is not
    the one it notes; a file already `reported` (named by a problem) is left out, as are
    shard files (verify's shard readers hash them)."""
    digests = summary.get('digests')
    digests = digests if isinstance(digests, dict) else {}
    problems = _summary_digest_problems(output_dir, summary, reported)
    rewritten = bool(problems) and metadata.SUMMARY_DIGEST in summary   # Its notes are moot.
    missing = [] if rewritten else [name for name in present
                                    if name not in digests and name != metadata.SUMMARY]
    if missing:
        more = f' and {len(missing) - 1} more files' if len(missing) > 1 else ''
        problems.append(f'{metadata.SUMMARY}: notes no SHA-256 of {missing[0]}{more} '
                        '(digests), so their bytes are not checked: written by a version '
                        'before it noted them, or edited')
    for name, digest in sorted(digests.items()):
        if (not dataset_files.is_dataset_file(name) or dataset_files.is_shard_name(name)
                or name in reported):
            continue
        found = bounded_reads.file_sha256(fileio.join(output_dir, name))
        if found is None:
            problems.append(f'{name}: missing')
        elif found != digest:
            problems.append(f'{name}: not the file the run wrote (its SHA-256 is not the one '
                            f'{metadata.SUMMARY} notes)')
    return problems


def _summary_digest_problems(output_dir: str, summary: dict, reported: set[str]) -> list[str]:
    """summary.json against the digest of itself it notes (metadata.summary_digest, over its
    text as this tool writes it: a byte changed anywhere in it is found)."""
    noted = summary.get(metadata.SUMMARY_DIGEST)
    if noted is None:
        return [f'{metadata.SUMMARY}: notes no SHA-256 of itself ({metadata.SUMMARY_DIGEST}), so '
                'what verify cannot recompute from the records (the run id, the options, the '
                'listings) is not checked: written by a version before it noted one, or edited']
    if metadata.SUMMARY in reported:
        return []
    data = bounded_reads.read_file(fileio.join(output_dir, metadata.SUMMARY), bounded=True)
    if data != metadata.dumps(summary) or noted != metadata.summary_digest(summary):
        return [f'{metadata.SUMMARY}: not the file the run wrote (its SHA-256 is not the one '
                f'its {metadata.SUMMARY_DIGEST} notes)']
    return []


def _not_own(info: dict, summary) -> str:
    """Why `summary` is not the summary of the dataset `info` (dataset_info.json) describes."""
    if not isinstance(summary, dict) or not isinstance(summary.get('splits'), dict):
        return 'missing or not a summary this tool wrote'
    try:
        layout.check_run_id(summary.get('run_id'))
    except ValueError:
        return (f'its run id {shown(summary.get("run_id"))} is not one this tool '
                'gives (16 hexadecimal digits)')
    if summary.get('dataset') != info.get('name'):
        return (f'it names the dataset {shown(summary.get("dataset"))}, '
                f'{metadata.DATASET_INFO} {info.get("name")!r}')
    splits = sorted(str(s.get('name')) for s in info['splits'] if isinstance(s, dict))
    if sorted(map(str, summary['splits'])) != splits:
        return (f'its splits {shown(sorted(map(str, summary["splits"])))} are not '
                f'those of {metadata.DATASET_INFO} {splits}')
    return f'{metadata.DATASET_INFO} does not name {metadata.MODULE} as its module'


def _formats_problems(info: dict, summary: dict) -> list[str]:
    """summary.json's file formats (where noted) against dataset_info.json's."""
    declared = [f.name for f in shard_formats.declared(info)]
    noted = summary.get('file_formats', declared)
    return [] if noted == declared else [
        f'{metadata.SUMMARY}: file_formats {shown(noted)}, {metadata.DATASET_INFO} declares '
        f'{declared!r}']


def metadata_problems(output_dir: str, info: dict, labels: bytes, reports: list,
                      follows: collections.Counter) -> list[str]:
    """Every problem of the files beside the shards but their digests (see the module
    docstring); `reports` are verify's reports of the shards of the dataset's first format.
    The counts of a split with a shard verify could not read to its end are not known: those
    that disagree are counted in `follows['count']`, not returned."""
    summary = bounded_reads.load_metadata(output_dir, metadata.SUMMARY)
    if not dataset_files.is_own_dataset(info, summary):
        return [f'{metadata.SUMMARY}: {_not_own(info, summary)}']
    names = labels.decode(errors='replace').splitlines()
    kinds = {}
    for report in reports:
        for key, kind in report.kinds.items():
            if kind is not None or key not in kinds:
                kinds[key] = kind
    try:
        problems = (_labels_problems(output_dir, labels)
                    + _features_problems(output_dir, len(names), kinds)
                    + _formats_problems(info, summary))
        for entry in info['splits']:
            split = entry['name']
            shards = sorted((r for r in reports if r.split == split), key=lambda r: r.index)
            noted = summary['splits'][split]
            problems += _split_problems(output_dir, split, noted, entry, shards,
                                        summary.get('damaged_images'))
            counts = _count_problems(split, noted, shards)
            if all(r.complete for r in shards):
                problems += counts
            else:
                follows['count'] += len(counts)
        return problems
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        return [f'{metadata.SUMMARY}: not a summary this tool wrote ({type(exc).__name__}: '
                f'{str(exc)[:100]})']
