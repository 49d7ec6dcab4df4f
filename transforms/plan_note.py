"""The plan document: what a planning call found, per split (inputs, labels, shards, bytes in
and out), and what its converted sample weighed. A plan-only job prints it (pipeline/plan.py
adds the time and cost estimates); a conversion writes it as its plan note, which the
launcher's progress display reads (pipeline/progress.py)."""
import json

from pipeline.io import fileio
from transforms.sharding import output_line


def plan_document(facts, label_map, plans: dict, sample: dict | None = None) -> dict:
    """Per split: inputs, ignored files, labels, shards, estimated bytes in and out; what the
    converted sample weighed and, when it was timed here, the rate measured (runs in the
    pipeline)."""
    splits = {}
    for split, plan in plans.items():
        labels = {t for t, where in facts.texts.items() if split in where} or facts.int_labels
        splits[split] = {'inputs': plan.count, 'ignored': facts.ignored.get(split, 0),
                         'listing': facts.listing_fingerprint(split),
                         'labels': len(labels), 'shards': plan.num_shards,
                         'chunks': plan.num_chunks, 'input_bytes': plan.input_bytes,
                         'output_bytes': plan.output_bytes,
                         'output_sampled': plan.output_sampled,
                         'shard_bytes': plan.output_bytes // plan.num_shards}
        if facts.streamed.get(split):   # Gzip archives: decompressed once into a blob.
            splits[split]['streamed_archives'] = sorted(facts.streamed[split])
    document = {'labels': len(label_map.names), 'splits': splits}
    if sample is None:
        return document
    document['sample'] = sample_summary(sample.get('weighed') or [])
    document['sample']['converted_by_run'] = sample.get('converted_by_run', False)
    rate = {k: v for k, v in sample.items() if k not in ('weighed', 'converted_by_run')}
    return dict(document, local_rate=rate) if rate else document


def sample_summary(weighed: list) -> dict:
    """What the converted sample weighed: per split its inputs, their bytes where known and
    their records' bytes; and the line the shards are sized by (sharding.output_line)."""
    splits = {}
    for split, size, out in weighed:
        found = splits.setdefault(split, dict.fromkeys(
            ('sampled', 'sized', 'input_bytes', 'records', 'output_bytes'), 0))
        found['sampled'] += 1
        found['sized'] += size is not None
        found['input_bytes'] += size or 0
        found['records'] += out > 0
        found['output_bytes'] += out
    line = output_line(weighed)
    return {'splits': splits, 'line': None if line is None else {
        'bytes_per_record': float(line[0]), 'bytes_per_input_byte': float(line[1])}}


def write_plan(facts, label_map, plans: dict, path: str, sample: dict | None = None,
               label_names: bool = False) -> None:
    """The last step of a plan-only job: its document, as JSON at `path`; with `label_names`
    (a conversion's note of its plan) the class name of every id too."""
    document = plan_document(facts, label_map, plans, sample)
    if label_names:
        document['label_names'] = list(label_map.names)
    fileio.write_bytes(path, dumps(document).encode())


def dumps(document: dict) -> str:
    return json.dumps(document, indent=2, sort_keys=True)
