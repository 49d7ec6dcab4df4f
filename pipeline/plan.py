"""The plan preview (`--plan_only`): what a conversion will produce, and what it will cost,
before any image is read.

The listing, label and shard-planning stages run as they would in the conversion, a
deterministic sample of the inputs converted as the conversion converts it to size the shards by
their output (transforms/local_rate.py, sharding.output_line); their result is a small
document per split (transforms/plan_note.py), to which `estimate` adds the time and cost model
below.

The model: Dataflow runs one SDK process per vCPU, and each process up to one work item per
harness thread (--number_of_worker_harness_threads, 4 by default here, pipeline/dataflow.py).
The rate per vCPU is measured with one work item per vCPU while every Cloud Storage read takes
50 ms (benchmarks/latency.py): the converter's CPU per image, the reads being hidden by
--reads_in_flight. More threads per process add reads in flight, not CPU, so they cannot raise
it; fewer reads in flight can lower it, as a thread converts at most --reads_in_flight /
seconds per read images/s (32 / 50 ms = 640/s, above the measured rate). A bucket serves
about 5,000 object reads/s at first and more only as Cloud Storage ramps it up; a plan that
reads faster is told how long the reads alone take under that ramp. The rate is measured;
everything else is an assumption stated in the output and in docs/cloud.md.

The time on this machine (a local runner) is measured instead, during the plan: the plan's own
time from the command's start (start-up, listing and planning, which the conversion repeats),
and the conversion at the rate of a sample of the inputs converted with the run's options
(transforms/local_rate.py) on the local workers, capped by the CPU the machine spent per image.
"""
import dataclasses
import math

from pipeline.io.sorted_runs import BUDGET_BYTES
from pipeline.base.splits import SPLITS

# Measured: CPU of the converter's processes per image, pass-through gs:// -> gs:// with 50 ms per
# Cloud Storage read and one worker process (one work item), 3.43 ms (benchmarks/latency.py,
# 2026-12-03, 2 vCPUs, 4000 images): about 290 images/s per vCPU, the reads being hidden (the
# run took 1.28x the one without latency, its steady rate the same). From local disk all of a
# conversion costs ~0.8 ms per image (benchmarks/benchmark.py), so most of this is the Cloud
# Storage client's work per read.
IMAGES_PER_VCPU_SECOND = 290
# Measured: the CPU that re-encoding every image adds, 1.55 ms per image of 300-500 px (the
# converter's steady rates with and without --reencode on 2 cores, 739 and 1,733 images/s:
# benchmarks/benchmark.py --workload distinct, 2026-12-06).
REENCODE_CPU_SECONDS = 0.00155
DATAFLOW_VCPUS_PER_WORKER = 4     # n2-standard-4, the default --machine_type.
# Assumptions, from Cloud Storage's request rate guidelines: a bucket's initial read capacity,
# and the ramp-up (the rate may double every 20 minutes).
BUCKET_READS_PER_SECOND = 5000
RAMP_DOUBLING_SECONDS = 20 * 60


def seconds_to_read(objects: int) -> float:
    """The least time in which a bucket serves `objects` reads, starting at
    BUCKET_READS_PER_SECOND and doubling every RAMP_DOUBLING_SECONDS:
    the T with integral_0^T R * 2^(t/D) dt = objects."""
    rate, doubling = BUCKET_READS_PER_SECOND, RAMP_DOUBLING_SECONDS
    return doubling * math.log2(1 + objects * math.log(2) / (rate * doubling))


@dataclasses.dataclass(frozen=True)
class Here:
    """This machine, for the time and memory of a local run: its cores, the local runner's
    worker processes, the seconds the plan took from the command's start (imports, the runner's
    start-up, listing, planning, and timing the sample), whether the output is gs://, and then
    the seconds of one small request to it; the plan's peak memory, and whether the runner
    runs in the launcher's process."""
    cores: int
    workers: int
    planning_seconds: float
    output_in_cloud: bool = False
    request_seconds: float = 0.0
    launcher_peak_bytes: int = 0    # The plan's own peak resident bytes (0: unknown).
    one_process: bool = False       # The runner runs in the launcher (no worker processes).


def output_requests(parts: int, shards: int, workers: int) -> float:
    """The requests a run makes to a gs:// output beyond what planning made and the sample
    timed, as many one after another (counted on the storage emulator by
    benchmarks/requests.py): per part of a shard (a chunk's records in it) its upload and its
    sidecars', and per shard its join, its sidecars and the deletes of its parts, shared by the
    workers; then the launcher's metadata, moves, journal and lock."""
    return 40 + (5 * parts + 6 * shards) / workers


def estimate(document: dict, here: Here | None = None, reencode: bool = False) -> dict:
    """Adds the time and worker model to a plan document: for Dataflow (`reencode`: every image
    is re-encoded), and with `here`, for a local run on this machine."""
    images = sum(s['inputs'] for s in document['splits'].values())
    cpu_per_image = 1 / IMAGES_PER_VCPU_SECOND + (REENCODE_CPU_SECONDS if reencode else 0)
    vcpu_hours = images * cpu_per_image / 3600
    workers = max(1, math.ceil(vcpu_hours / DATAFLOW_VCPUS_PER_WORKER))
    reads_per_second = workers * DATAFLOW_VCPUS_PER_WORKER / cpu_per_image
    local = time_here(document, images, here) if here else None
    memory = memory_here(document, here) if here else None
    return dict(document, estimate={
        'images': images,
        'input_bytes': sum(s['input_bytes'] for s in document['splits'].values()),
        'output_bytes': sum(s.get('output_bytes', s['input_bytes'])
                            for s in document['splits'].values()),
        'output_sampled': sum(s['sampled'] for s in
                              document.get('sample', {}).get('splits', {}).values()),
        'vcpu_hours': vcpu_hours,
        'seconds_here': local['seconds'] if local else None,
        'cores_here': here.cores if here else 0,
        'here': local,
        'memory_here': memory,
        'dataflow_workers_for_one_hour': workers,
        'reads_per_second': reads_per_second,
        'bucket_reads_per_second': BUCKET_READS_PER_SECOND,
        'read_limited_seconds': (seconds_to_read(images)
                                 if reads_per_second > BUCKET_READS_PER_SECOND else None),
        'assumptions': f'{IMAGES_PER_VCPU_SECOND} images/s per vCPU (pass-through, measured by '
                       'benchmarks/latency.py with 50 ms per Cloud Storage read and one work item '
                       f'per vCPU; --reencode adds {REENCODE_CPU_SECONDS * 1e3:.2f} ms of CPU per '
                       f'image{", counted here" if reencode else ""}), '
                       f'{DATAFLOW_VCPUS_PER_WORKER} vCPUs per Dataflow worker (n2-standard-4), '
                       'the default --reads_in_flight; a bucket serving '
                       f'{BUCKET_READS_PER_SECOND:,} reads/s at first, doubling every '
                       f'{RAMP_DOUBLING_SECONDS // 60} min at most; start-up and listing not '
                       'included',
    })


def time_here(document: dict, images: int, here: Here) -> dict:
    """The wall time of the same command without --plan_only on this machine: the plan's own
    time (start-up, listing, planning; the conversion repeats them, and the conversion of the
    sample too where it sizes the shards by it, else the sample's timing is taken off), plus
    the conversion at the rate measured for the sample (transforms/local_rate.py). The
    conversion runs on the workers that convert at once (at most one per core and per chunk),
    and cannot be faster than the cores give the CPU the whole machine spent per sampled image:
    with a gs:// output, the CPU it spent beyond the worker's own (a local storage emulator's,
    other processes') is counted twice, as the conversion writes back the bytes it read (the
    sample writes to local disk), and its requests to the output (`output_requests`) take the
    time of a request measured after planning."""
    rate = document.get('local_rate') or {}
    chunks = sum(s['chunks'] for s in document['splits'].values())
    parallel = max(1, min(here.workers, here.cores, chunks))
    repeated = document.get('sample', {}).get('converted_by_run', False)
    fixed = max(0.0, here.planning_seconds - (0.0 if repeated else rate.get('seconds', 0.0)))
    shards = sum(s['shards'] for s in document['splits'].values())
    storage = (output_requests(chunks + shards, shards, parallel) * here.request_seconds
               if here.output_in_cloud else 0.0)
    fixed += storage
    per_image = rate.get('seconds_per_image') or 1 / IMAGES_PER_VCPU_SECOND
    machine_cpu = rate.get('machine_cpu_seconds_per_image') or 0
    if here.output_in_cloud:   # The same bytes written back through the storage.
        machine_cpu += max(0.0, machine_cpu - rate.get('worker_cpu_seconds_per_image', 0))
    per_image_here = max(per_image / parallel, machine_cpu / here.cores)
    converting = images * per_image_here
    return {'seconds': fixed + converting, 'fixed_seconds': fixed, 'images': images,
            'storage_requests_seconds': storage,
            'converting_seconds': converting, 'workers': parallel,
            'seconds_per_image': rate.get('seconds_per_image'),
            'machine_cpu_seconds_per_image': rate.get('machine_cpu_seconds_per_image'),
            'images_timed': rate.get('images', 0)}


# The memory of a local run beyond what the plan measured (memory_here), from the code:
RUN_BUDGET_BYTES = BUDGET_BYTES   # What a sorted-run writer holds before it writes a run.
WRITING_COPIES = 3                # While it writes one: the records held, sorted, and as bytes.
HELD_REF_BYTES = 140              # A listed ref held beyond its pickle: the (key, pickle) tuple,
                                  # the key, the pickle's header, its place in the list.
JOIN_BYTES_PER_RECORD = 650       # A shard's join holds its parts' sidecars: per record its
                                  # hashes (SHA-256 in hex, ...) and its content mark, and its
                                  # source's characters (706 measured with 56-character paths).
LAUNCHER_BYTES_PER_PART = 1024    # The runner's copy of a part's PartDone and its shard's key.


def memory_here(document: dict, here: Here) -> dict | None:
    """The peak resident bytes of a local run without --plan_only: of its launcher, of its
    largest worker process and of all its processes together (each shared page once), from
    what the plan measured and what the run holds beyond it. None where the plan measured
    nothing (no sample converted, no /proc).

    Measured: the plan's own peak (the launcher: imports, the runner, listing and planning,
    which the run repeats) and the peak of the worker that converted the sample (its imports,
    its share of the listing, one conversion's working set), with the bytes that worker shares
    with the launcher it was forked from. Modelled, per worker, for its share of the inputs, in
    sizes the sample gives: listing holds each input's ref, encoded, in a sorted-run writer up
    to RUN_BUDGET_BYTES and then writes them out (as much again); the conversion files each
    record's digest and hashes up to that budget, and writing them takes WRITING_COPIES times
    what is held; a shard's join holds its parts' sidecars (JOIN_BYTES_PER_RECORD and the
    source's characters per record of the shard). These come one after another, each in what
    the one before freed, so a worker is estimated at the sample worker's peak plus the largest
    of them. The launcher adds what the runner keeps per part of a shard. Together, each page
    once as PSS counts them: the launcher, and every worker less what it shares with the
    launcher. In one process (no worker processes), all of it is the launcher's."""
    sample = (document.get('local_rate') or {}).get('memory')
    if not sample or not sample.get('peak_bytes') or not here.launcher_peak_bytes:
        return None
    splits = document['splits'].values()
    processes = 1 if here.one_process else max(1, here.workers)
    inputs = -(-sum(s['inputs'] for s in splits) // processes)
    listed = min(inputs * sample['ref_bytes'], RUN_BUDGET_BYTES)
    listing = 2 * listed + (listed / sample['ref_bytes'] * HELD_REF_BYTES
                            if sample['ref_bytes'] else 0)
    filing = WRITING_COPIES * min(inputs * sample['filed_bytes_per_record'], RUN_BUDGET_BYTES)
    join = (max((-(-s['inputs'] // s['shards']) for s in splits), default=0)
            * (JOIN_BYTES_PER_RECORD + sample['source_chars']))
    growth = max(listing, filing, join)
    parts = sum(s['chunks'] + s['shards'] for s in splits)
    launcher = here.launcher_peak_bytes + parts * LAUNCHER_BYTES_PER_PART
    if here.one_process:
        launcher = together = launcher + growth
        worker, workers = 0, 0
    else:
        worker, workers = sample['peak_bytes'] + growth, here.workers
        together = launcher + workers * max(0, worker - sample['shared_bytes'])
    return {'launcher_bytes': int(launcher), 'largest_worker_bytes': int(worker),
            'together_bytes': int(together), 'workers': workers,
            'plan_launcher_bytes': here.launcher_peak_bytes,
            'sample_worker_bytes': sample['peak_bytes'],
            'shared_bytes': sample['shared_bytes'],
            'inputs_per_worker': inputs, 'listing_bytes': int(listing),
            'filing_bytes': int(filing), 'join_bytes': int(join)}


def memory_line(memory: dict) -> str:
    """The memory a local run will need, and how it was estimated."""
    mb = lambda n: f'{n / (1 << 20):,.0f} MB'   # noqa: E731
    parts = (f'the listing\'s refs {mb(memory["listing_bytes"])}, the filed hashes '
             f'{mb(memory["filing_bytes"])} or a shard\'s join {mb(memory["join_bytes"])}')
    if not memory['workers']:
        return (f'Memory here: ~{mb(memory["together_bytes"])} in one process: this plan\'s peak '
                f'({mb(memory["plan_launcher_bytes"])}) and, for {memory["inputs_per_worker"]:,} '
                f'inputs, {parts}.')
    return (f'Memory here: ~{mb(memory["together_bytes"])} in all, the launcher '
            f'~{mb(memory["launcher_bytes"])} and each of {memory["workers"]} worker(s) up to '
            f'~{mb(memory["largest_worker_bytes"])}: this plan\'s peaks (the launcher '
            f'{mb(memory["plan_launcher_bytes"])}, the worker that converted the sample '
            f'{mb(memory["sample_worker_bytes"])}, {mb(memory["shared_bytes"])} of it shared '
            f'with the others) and, per worker for {memory["inputs_per_worker"]:,} inputs, '
            f'{parts}.')


def format_plan(document: dict) -> str:
    """The plan as a table and a few lines of estimates."""
    lines = [f'{"split":<12}{"inputs":>10}{"ignored":>9}{"labels":>8}{"shards":>8}{"chunks":>8}'
             f'{"input GB":>10}{"output GB":>11}{"MB/shard":>10}']
    for split in (s for s in SPLITS if s in document['splits']):
        s = document['splits'][split]
        lines.append(f'{split:<12}{s["inputs"]:>10}{s["ignored"]:>9}{s["labels"]:>8}'
                     f'{s["shards"]:>8}{s["chunks"]:>8}{s["input_bytes"] / 1e9:>10.2f}'
                     f'{s.get("output_bytes", s["input_bytes"]) / 1e9:>11.2f}'
                     f'{s["shard_bytes"] / 1e6:>10.1f}')
    streamed = sorted({archive for s in document['splits'].values()   # One may hold every split.
                       for archive in s.get('streamed_archives', ())})
    if streamed:
        lines += ['', f'{len(streamed)} gzip-compressed archive(s), each listed in one pass and '
                  'decompressed once more into the temporary folder (as much disk as its '
                  'members take uncompressed), then read by ranged reads: '
                  + ', '.join(streamed[:3]) + (' ...' if len(streamed) > 3 else '')]
    e = document['estimate']
    out = (f'from the records of {e["output_sampled"]} sampled inputs converted with these '
           'options' if e['output_sampled'] else 'as the input: no input could be sampled')
    lines += ['', f'{e["images"]} images, about {_size(e["input_bytes"])} in and '
              f'{_size(e["output_bytes"])} out (estimated {out}); {document["labels"]} label '
              'ids.',
              f'Conversion: about {e["vcpu_hours"]:.3g} vCPU-hours on Dataflow'
              + f'; one hour needs {e["dataflow_workers_for_one_hour"]} Dataflow n2-standard-4 '
              f'worker(s), reading {e["reads_per_second"]:,.0f} objects/s.']
    if e['read_limited_seconds'] is not None:
        lines.append(
            f'That is more than the ~{e["bucket_reads_per_second"]:,} object reads/s a bucket '
            'serves at first; Cloud Storage raises it gradually (at most doubling every 20 min), '
            f'so the reads alone take at least {e["read_limited_seconds"] / 3600:.1f} h however '
            'many workers run: reads beyond the bucket\'s rate are answered 429 and retried '
            'with backoff.')
    lines.append(f'Dataflow assumes {e["assumptions"]}.')
    if e.get('here'):
        lines.append(here_line(e['here']))
    if e.get('memory_here'):
        lines.append(memory_line(e['memory_here']))
    return '\n'.join(lines)


def here_line(here: dict) -> str:
    """The time on this machine and how it was measured."""
    if here['images_timed']:
        how = (f'the rate measured now: {here["images_timed"]} sampled inputs converted with these '
               'options by one worker (read, decode, checks, Example encoding, writing) at '
               f'{1 / here["seconds_per_image"]:,.0f} images/s, times {here["workers"]} worker(s), '
               'capped by the CPU the whole machine used per image meanwhile (other processes '
               'and a local storage emulator included)')
    else:
        how = (f'{IMAGES_PER_VCPU_SECOND} images/s per worker x {here["workers"]}, the Dataflow '
               'rate (no input could be sampled here)')
    rate = here['converting_seconds'] and here['images'] / here['converting_seconds']
    storage = here.get('storage_requests_seconds', 0.0)
    requests = (f' and {storage:.0f} s of requests to the gs:// output (one after another, '
                'each as long as one timed now)' if storage else '')
    return (f'Here: ~{here["seconds"]:.0f} s for the same command without --plan_only: '
            f'{here["fixed_seconds"] - storage:.0f} s of start-up, listing and planning (as this '
            f'plan took them){requests}, and {here["converting_seconds"]:.0f} s converting at '
            f'{rate:,.0f} images/s, {how}.')


def _size(count: int) -> str:
    for unit, scale in (('GB', 1e9), ('MB', 1e6)):
        if count >= scale:
            return f'{count / scale:.{1 if unit == "GB" else 0}f} {unit}'
    return f'{count / 1e3:.0f} KB'
