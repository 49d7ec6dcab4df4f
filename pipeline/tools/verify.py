"""Proves a written dataset is sound: `python -m pipeline.tools.verify OUTPUT_DIR [--sample F]`.

Reads every shard in parallel (one process per core) and checks each record's integrity
(TFRecord: length and data CRCs; ArrayRecord: the hash of every chunk), that it parses as
tf.train.Example with the expected keys and types, its label against the label names, its
SHA-256 key against its bytes, and (for all, or a `--sample` fraction) that the image decodes to
the stored size; then that shard names, shard counts and bytes agree with dataset_info.json,
and that no shard is missing or left from another run. A dataset written in two formats is
read in both: each shard of the second must hold exactly the records (byte for byte) of its
twin in the first, whose images are the ones decoded. Each TFRecord shard's SHARD.idx (DALI's
index, --dali_index) must hold exactly the offsets and sizes of its records, read from the
shard's framing; when summary.json says the run wrote them every TFRecord shard must have one,
and no other file may be named as the index of a shard. The files beside the shards are
checked against the records and against what the run noted in summary.json
(pipeline/tools/metadata_checks.py), and the data-quality findings are recomputed from the
records: exact copies within and across splits (pipeline/tools/quality_checks.py), and the
clusters of near-duplicates across splits against leakage.jsonl (leakage_checks.py). What it
cannot recompute is covered by the SHA-256s summary.json notes of itself, of the metadata files,
leakage.jsonl and each ArrayRecord shard (a TFRecord shard's bytes are its records framed). Every
check runs on its own: a shard with a bad record is still checked against summary.json, its twin
and its index, and what disagrees because its later records are unknown is summed in its line.
A file the dataset does not list is a warning.

Prints the findings (exact copies, damaged JPEGs kept by --damaged_images=keep, leakage) and
every problem with shard and record index (or the file's name), and exits non-zero if there is
any problem; a held lock and temporary folders of unfinished runs are warnings, an interrupted
commit an error (exit 2) that says how to complete it.
"""
import argparse
import collections
import multiprocessing
import os
import re
import sys

import numpy as np

from pipeline import credentials
from pipeline.io import fileio, gcs
from pipeline.output import (bounded_reads, commit_journal, dali_index, dataset_files, layout,
                             metadata, output_lock, records, shard_formats, temp_folder)
from pipeline.output.shard_formats import ShardFormat
from pipeline.base.settings import TEMP_PREFIX
from pipeline.errors import DatasetError, printable
from pipeline.tools import leakage_checks, metadata_checks, quality_checks
from pipeline.tools.quality_checks import Place
from pipeline.tools.shard_checks import ShardReport, ShardTask, check_shard


def _shard_names(info: dict, formats: list[ShardFormat]) -> dict[str, ShardFormat]:
    """The name of every shard dataset_info.json lists, with its format."""
    return {metadata.shard_name(info['name'], s['name'], i, len(s['shardLengths']), f): f
            for f in formats for s in info['splits'] for i in range(len(s['shardLengths']))}


def _layout_problems(expected: dict[str, ShardFormat], files: set[str]) -> list[str]:
    found = {name for name in files if dataset_files.is_shard_name(name)}
    problems = [f'{name}: missing shard' for name in sorted(set(expected) - found)]
    for name in sorted(found - set(expected)):
        problems.append(f'{name}: not part of this dataset (a shard from another run or dataset); '
                        'remove it')
    return problems


def _index_files(expected: dict[str, ShardFormat], files: set[str], summary: dict
                 ) -> tuple[list[str], set[str]]:
    """The problems of the DALI indexes in the folder as a whole (an index of no shard, beside
    a shard of another format, or present where `summary`, this dataset's summary.json or {},
    says the run wrote none), and the TFRecord shards whose index is read: all when the run
    wrote them, else those that have one."""
    wrote = summary.get('dali_index') is True
    tfrecords = {name for name, f in expected.items() if f == dali_index.FORMAT}
    problems, indexed = [], set()
    for name in sorted(files):
        shard = name.removesuffix(f'.{dali_index.SUFFIX}')
        if shard == name or not dataset_files.is_shard_name(shard):
            continue
        if shard in tfrecords:
            indexed.add(shard)
        elif shard in expected:
            problems.append(f'{name}: a DALI index beside {shard}, a shard in '
                            f'{expected[shard].name} (DALI indexes TFRecord shards only); '
                            'remove it')
        else:
            problems.append(f'{name}: the DALI index of no shard of this dataset; remove it')
    if indexed and summary and not wrote:
        problems.append(f'{metadata.SUMMARY}: dali_index is '
                        f'{metadata_checks.shown(summary.get("dali_index"))}, yet '
                        f'{len(indexed)} TFRecord shard(s) have a DALI index (e.g. '
                        f'{min(indexed)}.{dali_index.SUFFIX}); the run that wrote the dataset '
                        'wrote none')
    return problems, tfrecords if wrote else indexed


def _shard_count_problems(output_dir: str, info: dict) -> list[str]:
    """A line per split whose number of shards in dataset_info.json is not the one the run
    noted in summary.json; without a summary of this dataset, one line when dataset_info.json
    lists another number of shards than the folder holds."""
    summary = bounded_reads.load_metadata(output_dir, metadata.SUMMARY)
    if not dataset_files.is_own_dataset(info, summary):
        listed = len(shard_formats.declared(info)) * sum(len(s['shardLengths'])
                                                         for s in info['splits'])
        held = sum(1 for entry in fileio.list_dir(output_dir)
                   if not entry.is_dir and dataset_files.is_shard_name(entry.name))
        return [] if listed == held else [
            f'{metadata.DATASET_INFO}: lists {listed} shards, the folder holds {held} and has '
            f'no {metadata.SUMMARY} of this dataset; no shard was read']
    problems = []
    for split in info['splits']:
        noted = summary['splits'][split['name']]
        count = len(split['shardLengths'])
        shards = noted.get('shards') if isinstance(noted, dict) else None
        if shards != count:
            problems.append(f"{metadata.DATASET_INFO}: {split['name']} lists {count} shards, "
                            f'{metadata.SUMMARY} says {metadata_checks.shown(shards)}; no shard '
                            'was read')
    return problems


def _digest_differs(report: ShardReport, digests: dict) -> bool:
    """Whether the shard's bytes (a format that rewrites the records) are not those whose
    SHA-256 summary.json's `digests` notes."""
    noted = digests.get(report.name)
    return report.sha256 is not None and noted is not None and report.sha256 != noted


def _shard_digest_problems(reports: list[ShardReport], digests: dict,
                           problems: list[str]) -> list[str]:
    """A line for each shard read to its end whose bytes are not those the run wrote, unless
    one of `problems` names it already."""
    named = {problem.split(') ', 1)[0].split('): ', 1)[0] for problem in problems}
    lines = []
    for report in (r for r in reports if r.complete and _digest_differs(r, digests)):
        where = f'{report.split} shard {report.index} ({report.name}'
        if where not in named:
            lines.append(f'{where}): its bytes are not those the run wrote (its SHA-256 is not '
                         f'the one {metadata.SUMMARY} notes)')
    return lines


def _shard_problems(info: dict, reports: list[ShardReport], first: str, digests: dict,
                    follows: dict) -> list[str]:
    """Each shard's own problems, its records against dataset_info.json, a second format's
    shard against its twin in the `first` format, and each split's bytes. What disagrees of a
    shard verify could not read to its end (its count, its bytes against the SHA-256
    summary.json's `digests` notes) is counted in follows[report], not returned."""
    twins = {(r.split, r.index): r for r in reports if r.file_format == first}
    problems = []
    for split in info['splits']:
        lengths = [int(n) for n in split['shardLengths']]
        for report in (r for r in reports if r.split == split['name']):
            where = f"{split['name']} shard {report.index} ({report.name})"
            own = None if report.complete else follows.setdefault(_key(report),
                                                                  collections.Counter())
            problems += [f'{where} {p}' for p in report.problems + report.index_problems]
            if report.records != lengths[report.index]:
                if own is None:
                    problems.append(f'{where}: {report.records} records, dataset_info.json says '
                                    f'{lengths[report.index]}')
                else:
                    own['count'] += 1
            if own is not None and _digest_differs(report, digests):
                own['digest'] += 1
            twin = twins[(report.split, report.index)]
            if (report is not twin and report.complete and twin.complete
                    and report.content != twin.content):
                problems.append(f'{where}: records differ from {twin.name}')
        shards = [r for key, r in twins.items() if key[0] == split['name']]
        total = sum(r.bytes for r in shards)
        if all(r.complete for r in shards) and total != int(split['numBytes']):
            problems.append(f"{split['name']}: {total} bytes, dataset_info.json says "
                            f"{split['numBytes']}")
    return problems


def sources_at(output_dir: str, info: dict, places: set[Place]) -> dict[Place, str]:
    """The image/source of the records at `places`, each shard read again up to the last
    record wanted of it (a few records: the examples verify prints)."""
    wanted: dict[tuple[str, int], dict[int, Place]] = collections.defaultdict(dict)
    for place in places:
        wanted[place[:2]][place[2]] = place
    shard_format, names = shard_formats.declared(info)[0], {}
    for (split, shard), numbers in sorted(wanted.items()):
        path = metadata.shard_paths(output_dir, info, split, shard_format)[shard]
        last = max(numbers)
        try:
            for number, data in enumerate(shard_format.read_records(path)):
                if number in numbers:
                    source = records.decode_example(data)[records.SOURCE][0]
                    names[numbers[number]] = source.decode(errors='replace')
                if number >= last:
                    break
        except Exception:   # Named by place alone; verify reported why it cannot be read.
            continue
    return names


def _key(report: ShardReport) -> tuple[str, str, int]:
    return report.file_format, report.split, report.index


def _quality_problems(output_dir: str, info: dict, summary: dict, primary: list[ShardReport],
                      sample: float, follows: collections.Counter) -> list[str]:
    """Prints the data-quality findings the records give (exact copies, damaged JPEGs kept,
    leakage); returns their problems: where summary.json or leakage.jsonl say otherwise. Those
    that follow from shards verify could not read to their end (the copies and damage of
    their splits, all of leakage) are counted in `follows`, not returned."""
    table = np.concatenate([quality_checks.placed(r.split, r.index, r.rows) for r in primary]
                           or [np.zeros(0, quality_checks.PLACED)])
    copies = quality_checks.exact_copies(table)
    names = sources_at(output_dir, info, {p for pair in copies.examples for p in pair})
    damaged = collections.Counter()
    for report in primary:
        damaged[report.split] += report.damaged
    examples = [((r.split, r.index, number), source, reason)
                for r in primary for number, source, reason in r.damaged_examples]
    lines = (quality_checks.copies_lines(copies, names)
             + quality_checks.damaged_lines(damaged, examples[:quality_checks.EXAMPLES]))
    partial = {r.split for r in primary if not r.complete}
    problems = []
    for known in (False, True):
        splits = {s: n for s, n in summary.get('splits', {}).items() if (s in partial) != known}
        found = (quality_checks.copies_problems(splits, copies)
                 + quality_checks.damaged_problems({**summary, 'splits': splits}, damaged,
                                                   sample))
        if known:
            problems += found
        else:
            follows['count'] += len(found)
    hashed = any(records.PHASH in r.kinds for r in primary)
    if leakage_checks.leakage_action(summary) == 'off':
        lines.append('leakage: not checked by the conversion (--leakage=off)')
        found = leakage_checks.Leakage([], {}, [])
    else:
        found = leakage_checks.find_leakage(table)
        lines += leakage_checks.leakage_lines(found)
    leaked = leakage_checks.leakage_problems(output_dir, summary, found,
                                             leakage_checks.Places(table), hashed)
    if partial:
        follows.update('leakage' if p.startswith(metadata.LEAKAGE) else 'count' for p in leaked)
    else:
        problems += leaked
    for line in lines:
        print(printable(line))
    return problems


LINES_PER_KIND = 20   # Problems of one kind printed; the rest are counted in the last line.


def capped(problems: list[str]) -> list[str]:
    """`problems` with at most LINES_PER_KIND of each kind (_kind), then one line that counts
    the problems not shown, by kind."""
    shown, hidden, lines = collections.Counter(), collections.Counter(), []
    for problem in problems:
        kind = _kind(problem)
        shown[kind] += 1
        if shown[kind] <= LINES_PER_KIND:
            lines.append(problem)
        else:
            hidden[kind] += 1
    if hidden:
        lines.append(f'... and {sum(hidden.values())} more problem(s) of the kinds shown '
                     'above, not shown: ' + '; '.join(f'{kind} ({n} more)'
                                                      for kind, n in hidden.items()))
    return lines


def _kind(problem: str) -> str:
    """What a problem is, without where (the text after its first ': '), with numbers as N and
    quoted text as '...'."""
    text = problem.split(': ', 1)[-1]
    return re.sub(r'\d+', 'N', re.sub(r"'[^']*'", "'...'", text))


def warnings(output_dir: str) -> list[str]:
    """What is left in `output_dir` besides the dataset: a lock, temporary folders."""
    found = []
    state = output_lock.read_lock(output_dir)
    if state is not None:
        found.append(f'{output_lock.lock_path(output_dir)}: held by '
                     f'{output_lock.describe(state)}; {output_lock.lock_advice(state)}')
    for folder in temp_folder.found_in(output_dir):
        size = f'{fileio.tree_bytes(folder.path) / 1e6:.1f} MB'
        if folder.state == layout.COMMITTED:
            found.append(f'{folder.path}: left by run {folder.run_id}, whose commit finished '
                         f'({size}); the next run on this folder removes it')
        else:
            found.append(f'{folder.path}: temporary folder of an unfinished run ({size}); '
                         'rerunning it resumes from there, --clean_temp or --overwrite removes it')
    return found


def _tasks(output_dir: str, info: dict, summary: dict, names: list[str], sample: float,
           indexed: set[str]) -> list[ShardTask]:
    """A task per shard; a second format's records must equal the first's, so only the
    first's images are decoded and hashed."""
    formats = shard_formats.declared(info)
    action = leakage_checks.leakage_action(summary)
    return [ShardTask(f, s['name'], i, path, tuple(names), sample if f == formats[0] else 0.0,
                      fileio.basename(path) in indexed,
                      None if action is None else action != 'off',
                      f == formats[0] and summary.get('leakage') is None,
                      summary.get('damaged_images') == 'keep')
            for f in formats for s in info['splits']
            for i, path in enumerate(metadata.shard_paths(output_dir, info, s['name'], f))]


def _read_shards(tasks: list[ShardTask], formats: list[ShardFormat],
                 processes: int | None) -> list[ShardReport]:
    """check_shard of every task, in a pool of `processes` (here when 1), in dataset order."""
    if processes == 1:
        reports = list(map(check_shard, tasks))
    else:
        with multiprocessing.get_context('spawn').Pool(processes) as pool:
            reports = list(pool.imap_unordered(check_shard, tasks))
    order = [f.name for f in formats]
    return sorted(reports, key=lambda r: (order.index(r.file_format), r.split, r.index))


def _no_dataset(output_dir: str) -> str:
    """Why `output_dir` holds no dataset to verify, as one line: no such folder, or no dataset
    in it, with what an unfinished run left there."""
    if not fileio.is_gcs(output_dir) and not os.path.isdir(output_dir):
        return f'{output_dir} does not exist: give the --output_dir of a conversion'
    left = warnings(output_dir)
    return (f'{output_dir} has no readable dataset_info.json and labels.txt (a JSON object and a '
            'text file of this tool)' + (f'; it holds {left[0]}' if left else ''))


def verify(output_dir: str, sample: float = 1.0, processes: int | None = None) -> list[str]:
    """All problems of the dataset under `output_dir` ([] when it is sound)."""
    if fileio.is_gcs(output_dir):   # One line, not a client's retries and traceback.
        problem = gcs.bucket_name_problem(output_dir)
        if problem:
            raise DatasetError(f'{printable(output_dir)}: {problem}')
        credentials.check_credentials([output_dir])
    output_dir = output_dir.rstrip('/')
    if not fileio.is_gcs(output_dir) and os.path.exists(output_dir) \
            and not os.path.isdir(output_dir):
        raise DatasetError(f'{printable(output_dir)} is not a folder: give the --output_dir '
                           'of a conversion')
    journal = commit_journal.read_journal(output_dir)
    if journal is not None:
        raise DatasetError(f'{output_dir} holds an interrupted commit of run {journal.run_id} '
                           f'({commit_journal.journal_path(output_dir)}); rerun the conversion '
                           'command to complete it')
    info = bounded_reads.load_metadata(output_dir, metadata.DATASET_INFO)
    labels = bounded_reads.read_file(fileio.join(output_dir, metadata.LABELS), bounded=True)
    if info is None or labels is None:
        raise DatasetError(_no_dataset(output_dir))
    names = labels.decode(errors='replace').splitlines()
    named = dataset_files.named_files(info, fileio.join(output_dir, metadata.DATASET_INFO))
    mismatched = _shard_count_problems(output_dir, info)
    if mismatched:   # No shard is read nor named one by one: the counts already disagree.
        print(f'{len(mismatched)} problem(s)')
        return mismatched
    summary = bounded_reads.load_metadata(output_dir, metadata.SUMMARY)
    own = summary if dataset_files.is_own_dataset(info, summary) else {}
    formats = shard_formats.declared(info)
    expected = _shard_names(info, formats)
    entries = fileio.list_dir(output_dir)
    files = {entry.name for entry in entries if not entry.is_dir}
    # A folder named as no shard of the dataset lists is an extra shard or index all the same.
    files |= {e.name for e in entries if e.is_dir and e.name not in expected
              and dataset_files.is_shard_name(e.name.removesuffix(f'.{dali_index.SUFFIX}'))}
    index_problems, indexed = _index_files(expected, files, own)
    problems = (_layout_problems(expected, files) + index_problems
                + _link_problems(output_dir, set(named) | set(expected) | files))
    reports = _read_shards(_tasks(output_dir, info, own, names, sample, indexed), formats,
                           processes)
    digests = own.get('digests') if isinstance(own.get('digests'), dict) else {}
    follows: dict = {}   # What disagrees because shards could not be read to their end.
    problems += _shard_problems(info, reports, formats[0].name, digests, follows)
    primary = [r for r in reports if r.file_format == formats[0].name]
    common = collections.Counter()
    problems += metadata_checks.metadata_problems(output_dir, info, labels, primary, common)
    problems += _quality_problems(output_dir, info, own, primary, sample, common)
    problems += _shard_digest_problems(reports, digests, problems)
    if own:
        rebuilt = {n for n, f in expected.items() if f.joins_parts} | {
            n for n in files if dataset_files.is_index_name(n)}
        present = [n for n in _listed(named, own) if n in files and n not in rebuilt]
        problems += metadata_checks.digest_problems(
            output_dir, own, present, {p.split(':', 1)[0] for p in problems})
    problems = _followed(problems, reports, follows, common)
    _print_summary(info, reports, problems)
    return problems


def _links(output_dir: str) -> dict[str, str]:
    """{name: where it leads} of the symbolic links in a local `output_dir`."""
    if fileio.is_gcs(output_dir):
        return {}
    with os.scandir(output_dir) as entries:
        return {e.name: os.readlink(e.path) for e in entries if e.is_symlink()}


def _link_problems(output_dir: str, dataset_names: set[str]) -> list[str]:
    """Each file of the dataset that is a symbolic link: a copy of the folder would miss it."""
    return [f'{name}: a symbolic link to {printable(target)}, not a file of the folder; replace '
            'it with the file itself' for name, target in sorted(_links(output_dir).items())
            if name in dataset_names]


def _listed(named: list[str], summary: dict) -> list[str]:
    """The files of the dataset, of those its dataset_info.json names (`named`): the class
    names under an earlier version's name only where summary.json notes no digests, or that
    file's."""
    digests = summary.get('digests')
    return [n for n in named if n != metadata.OLD_CLASS_NAMES
            or not isinstance(digests, dict) or n in digests]


def _followed(problems: list[str], reports: list[ShardReport], follows: dict,
              common: collections.Counter) -> list[str]:
    """`problems` with the line of each shard verify could not read to its end saying what
    disagrees because of it (`follows` of it; the first also `common`, what all such shards
    make unknown: counts of their splits, leakage)."""
    lines = {}
    for report in (r for r in reports if not r.complete):
        counts = follows.get(_key(report), collections.Counter())
        if not lines:
            counts = counts + common
        where = f'{report.split} shard {report.index} ({report.name}) {report.problems[-1]}'
        lines[where] = where + _consequences(counts)
    return [lines.get(problem, problem) for problem in problems]


def _consequences(counts: collections.Counter) -> str:
    """' (and so: its digest, 2 counts and the leakage file disagree)', or '' for none."""
    parts = ((['its digest'] if counts['digest'] else [])
             + ([f'{counts["count"]} count' + 's' * (counts['count'] > 1)] if counts['count']
                else [])
             + (['the leakage file'] if counts['leakage'] else []))
    if not parts:
        return ''
    named = ', '.join(parts[:-1]) + ' and ' + parts[-1] if len(parts) > 1 else parts[0]
    verb = 'disagree' if len(parts) > 1 or counts['count'] > 1 else 'disagrees'
    return f' (and so: {named} {verb})'


def unlisted(output_dir: str) -> list[str]:
    """The files in `output_dir` that are not files of its dataset, nor of the output folder's
    protocol, nor shards or indexes (verify names those as problems)."""
    info = bounded_reads.load_metadata(output_dir, metadata.DATASET_INFO)
    summary = bounded_reads.load_metadata(output_dir, metadata.SUMMARY)
    named = set(_listed(dataset_files.named_files(
        info, fileio.join(output_dir, metadata.DATASET_INFO)),
        summary if isinstance(summary, dict) else {}))
    protocol = {fileio.basename(output_lock.lock_path(output_dir)),
                fileio.basename(commit_journal.journal_path(output_dir))}
    links = _links(output_dir)
    found = []
    for entry in fileio.list_dir(output_dir):
        name = entry.name
        if (name in named or name in protocol or entry.name.startswith(TEMP_PREFIX)
                or dataset_files.is_shard_name(name.removesuffix(f'.{dali_index.SUFFIX}'))):
            continue   # The dataset's own, the protocol's, or named by verify's problems.
        what = ('a symbolic link' if name in links else 'a folder' if entry.is_dir
                else 'a file')
        found.append(f'{name}: {what}, not part of this dataset ({metadata.DATASET_INFO} does not '
                     'list it); verify did not read it')
    return sorted(found)


def _print_summary(info: dict, reports: list[ShardReport], problems: list[str]) -> None:
    for file_format in (f.name for f in shard_formats.declared(info)):
        for split in info['splits']:
            shards = [r for r in reports
                      if r.split == split['name'] and r.file_format == file_format]
            print(f"{split['name']:<12}{sum(r.records for r in shards):>10} records"
                  f"{len(shards):>6} {file_format + ' shards':<20}"
                  f"{sum(r.bytes for r in shards) / 1e6:>8.1f} MB")
    print(f'{len(problems)} problem(s)' if problems else 'OK: no problems found')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog='python -m pipeline.tools.verify', description=__doc__.split('\n\n')[0])
    parser.add_argument('output_dir', help='The dataset folder (local or gs://).')
    parser.add_argument('--sample', type=float, default=1.0,
                        help='Fraction of images to decode (default 1: all); every record is '
                        'still read, CRC-checked, parsed and hashed.')
    parser.add_argument('--processes', type=int, default=None, help='Default: one per core.')
    args = parser.parse_args(argv)
    try:
        problems = verify(args.output_dir, args.sample, args.processes)
        output_dir = args.output_dir.rstrip('/')
        for warning in warnings(output_dir) + unlisted(output_dir):
            print(f'warning: {printable(warning)}', file=sys.stderr)
    except DatasetError as exc:
        print(f'error: {exc}', file=sys.stderr)
        return 2
    for problem in capped(problems):
        print(printable(problem), file=sys.stderr)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
