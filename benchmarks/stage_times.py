"""Where a local run's wall time goes, stage by stage, as the command line runs.

    python -m benchmarks.stage_times [--n 10000] [--runs 5] [FLAG ...]

Converts the benchmark workload (benchmarks/workload.py: distinct images) with the command
line's own entry (`pipeline.run`, its default runner: a worker process per core), each run in a
process of its own that notes when each fused stage of Beam's local runner starts and how long
it takes: FnApiRunner's `_execute_bundle`, which runs a stage's bundles on the workers, is
wrapped, so this measures and nothing else (a Beam without that method stops it with one line).
Prints the median over the runs of each stage's wall time, named by its first and last step,
and of a run's phases: the launcher alone (until the first stage), the stages before the
conversion (`Encode Chunks`), the conversion, the stages after it, and the whole process. Extra
FLAGs go to the command (`--leakage=off`, `--reencode`). A stage's time includes the wait for
Beam's state sampler at the end of its bundles (docs/performance.md).
"""
import argparse
import atexit
import json
import os
import re
import runpy
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.workload import make_workload

CONVERSION = 'Encode-Chunks-Encode'
_STEP = re.compile(r'ref_AppliedPTransform_(.+?)_\d+\)|\(+([^()+]+?)/Read\)')


def _child(notes: str, argv: list[str]) -> None:
    """Runs the command line with `argv`, writing (start s, seconds, stage name) of each stage
    and the time the command ended to `notes`, one JSON list a line."""
    started = time.perf_counter()
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    execute = getattr(fn_runner.FnApiRunner, '_execute_bundle', None)
    if execute is None:
        sys.exit("this Beam's FnApiRunner has no _execute_bundle: stage times cannot be taken")
    stream = open(notes, 'w')

    def timed(self, context, bundle, *args, **kwargs):
        begun = time.perf_counter()
        try:
            return execute(self, context, bundle, *args, **kwargs)
        finally:
            stream.write(json.dumps([begun - started, time.perf_counter() - begun,
                                     bundle.stage.name]) + '\n')

    def ended() -> None:   # The command ends with its exit functions, then os._exit.
        stream.write(json.dumps([time.perf_counter() - started, 0.0, 'end']) + '\n')
        stream.close()

    fn_runner.FnApiRunner._execute_bundle = timed
    atexit.register(ended)
    sys.argv = ['pipeline.run', *argv]
    runpy.run_module('pipeline.run', run_name='__main__')


def label(stage: str) -> str:
    """A fused stage's name as its first and last step."""
    steps = [a or b for a, b in _STEP.findall(stage)
             if not (a or b).startswith('ref_PCollection')] or [stage[:60]]
    return steps[0] if len(steps) == 1 else f'{steps[0]} .. {steps[-1]}'


def phases(notes: list[list]) -> dict[str, float]:
    """A run's phases (seconds) from its notes."""
    stages = [n for n in notes if n[2] != 'end']
    end = next(n[0] for n in notes if n[2] == 'end')
    at = next(i for i, n in enumerate(stages) if CONVERSION in n[2])
    return {'launcher alone': stages[0][0],
            'stages before the conversion': stages[at][0] - stages[0][0],
            'conversion': stages[at][1],
            'stages after it': end - stages[at][0] - stages[at][1],
            'whole command (to its end)': end}


def main() -> None:
    if sys.argv[1:2] == ['--child']:
        return _child(sys.argv[2], sys.argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--n', type=int, default=10000)
    parser.add_argument('--runs', type=int, default=5)
    parser.add_argument('--workdir', default=os.path.join(tempfile.gettempdir(), 'image_tfrecords_bench'))
    args, flags = parser.parse_known_args()
    workload = make_workload(os.path.join(args.workdir, f'images-{args.n}-distinct'), args.n,
                             distinct=True)
    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        for run in range(args.runs):
            notes = os.path.join(scratch, f'notes-{run}.jsonl')
            subprocess.run([sys.executable, '-m', 'benchmarks.stage_times', '--child', notes,
                            f'--input_dir={workload}', f'--output_dir={scratch}/out-{run}', *flags],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with open(notes) as stream:
                runs.append([json.loads(line) for line in stream])
    median = statistics.median
    print(f'{args.n} distinct images, {" ".join(flags) or "default flags"}, {os.cpu_count()} '
          f'cores; medians of {args.runs} runs, each a process of its own\n')
    print('| phase | seconds (min-max) |\n| --- | ---: |')
    for name in phases(runs[0]):
        values = [phases(notes)[name] for notes in runs]
        print(f'| {name} | {median(values):.3f} ({min(values):.3f}-{max(values):.3f}) |')
    print('\n| stage (first .. last step) | ms (min-max) |\n| --- | ---: |')
    stages = [[n for n in notes if n[2] != 'end'] for notes in runs]
    for index in range(min(map(len, stages))):
        values = [of_run[index][1] * 1000 for of_run in stages]
        print(f'| {label(stages[0][index][2])} | {median(values):.1f} '
              f'({min(values):.1f}-{max(values):.1f}) |')


if __name__ == '__main__':
    main()
