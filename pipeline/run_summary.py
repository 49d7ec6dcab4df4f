"""The end of a run as the command line prints it, from its summary (summary.json): the table of
inputs, records, shards and bytes per split and records per class; what the quality checks
found; the wall time and rate; and how to load the dataset."""
from pipeline.base.splits import SPLITS
from pipeline.errors import printable
from pipeline.output import shard_formats
from pipeline.quality.pairing import MAX_BUCKET


def format_summary(summary: dict) -> str:
    """The end-of-run table: inputs, records, shards, bytes, skipped and ignored files per split;
    records per class; the wall time and the rate of the inputs converted in it (work reused
    from an earlier attempt is counted apart)."""
    splits = {name: summary['splits'][name] for name in SPLITS if name in summary['splits']}
    dropped = any(s.get('dropped_copies') for s in splits.values())   # --leakage=drop
    lines = [f'{"split":<12}{"inputs":>9}{"records":>9}{"skipped":>9}'
             + (f'{"dropped":>9}' if dropped else '')
             + f'{"ignored":>9}{"shards":>8}{"MB":>9}{"kept as is":>12}{"damaged":>9}']
    for split, s in splits.items():
        lines.append(f'{split:<12}{s["inputs"]:>9}{s["records"]:>9}{s["skipped"]:>9}'
                     + (f'{s.get("dropped_copies", 0):>9}' if dropped else '')
                     + f'{s["ignored"]:>9}{s["shards"]:>8}{s["bytes"] / 1e6:>9.1f}'
                     f'{s["passed_through"]:>12}{s.get("damaged", 0):>9}')
    classes = sorted({c for s in splits.values() for c in s['classes']})
    shown = classes[:20]
    lines.append('')
    lines.append(f'{"class":<24}' + ''.join(f'{split:>12}' for split in splits))
    for name in shown:
        lines.append(f'{printable(name)[:23]:<24}' + ''.join(
            f'{s["classes"].get(name, 0):>12}' for s in splits.values()))
    if len(classes) > len(shown):
        lines.append(f'... and {len(classes) - len(shown)} more classes (see summary.json)')
    for split, s in splits.items():
        if s['empty_classes']:
            empty = ', '.join(map(printable, s['empty_classes'][:10]))
            why = (f'skipped or dropped as later-split copies; see errors-{split}.jsonl and '
                   'leakage.jsonl' if s.get('dropped_copies') else
                   f'skipped; see errors-{split}.jsonl')
            lines.append(f'{split}: no records for class(es) {empty} (no input of theirs was '
                         f'listed, or all were {why})')
    lines += quality_lines(summary)
    total = sum(s['inputs'] for s in splits.values())
    chunks = summary.get('chunks', {})
    converted = chunks.get('inputs_converted', total) if chunks.get('reused') else total
    if not summary.get('converted_now', True):
        lines.append(f'\n{total} inputs, converted by an earlier run of this command; nothing '
                     f'converted now ({summary.get("seconds", 0):.1f} s)')
    elif summary.get('seconds'):
        rate = f'{converted / summary["seconds"]:.0f} inputs/s'
        if converted != total:
            rate = f'{converted} converted now: {rate}'
        lines.append(f'\n{total} inputs in {summary["seconds"]:.1f} s of wall time, start-up '
                     f'included ({rate})')
    if chunks.get('reused'):
        lines.append(f'reused {chunks["reused"]} of {chunks["reused"] + chunks["converted"]} '
                     f'chunks converted by an earlier attempt ({total - converted} inputs)')
    return '\n'.join(lines)


def load_hint(summary: dict) -> str:
    """How to load the dataset just written, for each format it has."""
    out = summary['output_dir']
    lines = ['import tensorflow_datasets as tfds']
    for shard_format in shard_formats.parse(','.join(summary['file_formats'])):
        lines += [line.format(out=out) for line in shard_format.load_lines]
    if summary.get('dali_index'):
        lines.append('# or with NVIDIA DALI: fn.readers.tfrecord(path=shards, index_path=[s + '
                     '".idx" for s in shards], ...) (docs/loading.md)')
    return '\n'.join(f'  {line}' for line in lines)


def quality_lines(summary: dict) -> list[str]:
    """The end-of-run table's lines on damaged JPEGs, exact copies and leakage (none for older
    summaries)."""
    lines = []
    damaged = {split: s['damaged'] for split, s in summary['splits'].items() if s.get('damaged')}
    if damaged:
        action = {'skip': 'skipped', 'keep': 'kept as they are',
                  'reencode': 'stored as Pillow decodes them'}[summary['damaged_images']]
        lines.append(f'damaged JPEGs (strict libjpeg-turbo): {sum(damaged.values())}, {action} ('
                     + ', '.join(f'{split} {n}' for split, n in damaged.items())
                     + '; see damaged-SPLIT.jsonl)')
    lines += _copies_lines(summary)
    leakage = summary.get('leakage')
    if leakage is None:
        return lines
    if leakage['action'] == 'off':
        return lines + ['leakage: not checked (--leakage=off: no perceptual hashes, no '
                        'leakage.jsonl)']
    if leakage['clusters']:
        dropped = sum(s.get('dropped_copies', 0) for s in summary['splits'].values())
        lines.append(f'leakage: {leakage["clusters"]} cluster(s) of near-duplicates span splits '
                     f'within {leakage["radius"]} of 64 bits ({leakage["images"]} images: '
                     f'{_counts(_in_split_order(leakage["by_split"]))}; the largest '
                     f'{leakage["largest"]}; closest pair exact in {leakage["exact"]}, mirrored '
                     f'in {leakage["mirrored"]}): '
                     + _counts(tuple(leakage['between'].items()))
                     + (f'; {dropped} later-split copies dropped' if dropped else '')
                     + '; see leakage.jsonl')
    else:
        lines.append(f'leakage: no near-duplicates across splits (within {leakage["radius"]} of '
                     '64 bits)')
    flat = sum(leakage['flat_images'].values())
    if flat:
        lines.append(f'leakage: {flat} flat image(s) (blank or constant) were not compared')
    if leakage['crowded_buckets']:
        images = sum(b['images'] for b in leakage['crowded_buckets'])
        lines.append(f'leakage: {len(leakage["crowded_buckets"])} hash bucket(s) shared by more '
                     f'than {MAX_BUCKET} images ({images} in all: a degenerate look, e.g. '
                     f'{leakage["crowded_buckets"][0]["examples"][0]}) were not paired')
    return lines


def _copies_lines(summary: dict) -> list[str]:
    """The line on exact copies within splits, with an example."""
    copies = {split: s['exact_copies'] for split, s in summary['splits'].items()
              if s.get('exact_copies')}
    if not copies:
        return []
    examples = [pair for pairs in summary.get('copy_examples', {}).values() for pair in pairs]
    example = (f'; e.g. {printable(examples[0][0])} is {printable(examples[0][1])}'
               if examples else '')
    return [f'exact copies within a split: {sum(copies.values())} ({_counts(_in_split_order(copies))}'
            f'): byte-identical images under other names, each stored as a record{example}']


def _in_split_order(counts: dict) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(counts.items(), key=lambda item: SPLITS.index(item[0])))


def _counts(sizes: tuple[tuple[str, int], ...]) -> str:
    return ', '.join(f'{split} {n}' for split, n in sizes)
