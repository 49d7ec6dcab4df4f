"""The plan preview (`--plan_only`): what a conversion will produce, and what it will cost,
before any image is read.

The listing, label and shard-planning stages run as they would in the conversion; their result
is a small document per split, to which `estimate` adds the time and cost model below. The
model's rate is measured here, by benchmarks/benchmark.py; everything else is an assumption
stated in the output and in the README.
"""
import json
import math

from pipeline.formats import fileio
from transforms.settings import SPLITS

# Measured: steady-state pass-through conversion per core, 2388 images/s on 2 vCPUs (AMD EPYC,
# benchmarks/benchmark.py, 2026-12-02), i.e. about 1190 images/s per vCPU.
IMAGES_PER_VCPU_SECOND = 1190
DATAFLOW_VCPUS_PER_WORKER = 4     # n2-standard-4, the default --machine_type.


def plan_document(facts, label_map, plans: dict) -> dict:
    """Per split: inputs, ignored files, labels, shards, estimated bytes (runs in the pipeline)."""
    splits = {}
    for split, plan in plans.items():
        labels = {t for t, where in facts.texts.items() if split in where} or facts.int_labels
        splits[split] = {'inputs': plan.count, 'ignored': facts.ignored.get(split, 0),
                         'labels': len(labels), 'shards': plan.num_shards,
                         'chunks': plan.num_chunks, 'input_bytes': plan.input_bytes,
                         'shard_bytes': plan.input_bytes // plan.num_shards}
    return {'labels': len(label_map.names), 'splits': splits}


def write_plan(facts, label_map, plans: dict, path: str) -> None:
    """The last step of a plan-only job: its document, as JSON at `path`."""
    fileio.write_bytes(path, dumps(plan_document(facts, label_map, plans)).encode())


def estimate(document: dict, cores: int) -> dict:
    """Adds the time and worker model to a plan document."""
    images = sum(s['inputs'] for s in document['splits'].values())
    vcpu_hours = images / IMAGES_PER_VCPU_SECOND / 3600
    return dict(document, estimate={
        'images': images,
        'input_bytes': sum(s['input_bytes'] for s in document['splits'].values()),
        'vcpu_hours': vcpu_hours,
        'seconds_here': images / IMAGES_PER_VCPU_SECOND / max(1, cores),
        'cores_here': cores,
        'dataflow_workers_for_one_hour': max(1, math.ceil(vcpu_hours / DATAFLOW_VCPUS_PER_WORKER)),
        'assumptions': f'{IMAGES_PER_VCPU_SECOND} images/s per vCPU (pass-through, measured by '
                       'benchmarks/benchmark.py; --reencode is about 0.65 of that), '
                       f'{DATAFLOW_VCPUS_PER_WORKER} vCPUs per Dataflow worker (n2-standard-4); '
                       'start-up, listing and Cloud Storage latency not included',
    })


def format_plan(document: dict) -> str:
    """The plan as a table and a few lines of estimates."""
    lines = [f'{"split":<12}{"inputs":>10}{"ignored":>9}{"labels":>8}{"shards":>8}{"chunks":>8}'
             f'{"input GB":>10}{"MB/shard":>10}']
    for split in (s for s in SPLITS if s in document['splits']):
        s = document['splits'][split]
        lines.append(f'{split:<12}{s["inputs"]:>10}{s["ignored"]:>9}{s["labels"]:>8}'
                     f'{s["shards"]:>8}{s["chunks"]:>8}{s["input_bytes"] / 1e9:>10.2f}'
                     f'{s["shard_bytes"] / 1e6:>10.1f}')
    e = document['estimate']
    lines += ['', f'{e["images"]} images, about {e["input_bytes"] / 1e9:.1f} GB in and out '
              f'(pass-through keeps the bytes); {document["labels"]} label ids.',
              f'Conversion: about {e["vcpu_hours"]:.3g} vCPU-hours'
              + (f': ~{e["seconds_here"]:.0f} s on the {e["cores_here"]} cores here' if e['cores_here']
                 else '')
              + f'; one hour needs {e["dataflow_workers_for_one_hour"]} Dataflow n2-standard-4 '
              'worker(s).',
              f'Assumes {e["assumptions"]}.']
    return '\n'.join(lines)


def dumps(document: dict) -> str:
    return json.dumps(document, indent=2, sort_keys=True)
