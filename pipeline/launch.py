"""A launch of the converter: its flags parsed once and resolved into what every later step asks
of them (the runner kind, whether this process waits for the job, how many local worker
processes run it, where the output goes), then checked once, without I/O (`validate`).

`resolve` is the only reader of a run's flags (the command line, the job API's keywords, the
classic builder's options, a Flex Template's parameters); nothing else reads argv or derives the
runner kind. The flags themselves are defined in pipeline/options.py.
"""
import argparse
import dataclasses
import difflib
import os
import re
from typing import Sequence

from apache_beam.options.pipeline_options import (
    DirectOptions, GoogleCloudOptions, PipelineOptions, TestOptions, TypeOptions)

from pipeline import beam_internals, dataflow
from pipeline.base.runners import RunnerKind, runner_kind, runner_name
from pipeline.base.settings import MAX_LABEL_ID
from pipeline.errors import DatasetError, printable
from pipeline.inputs import registry
from pipeline.io import gcs
from pipeline.options import ConverterOptions, parse_bool
from pipeline.output import dali_index, shard_formats

MAX_WORKERS = 256          # --direct_num_workers: each worker process holds a few hundred MB.
MAX_READS_IN_FLIGHT = 1024  # --reads_in_flight: a thread each, per converting thread.


@dataclasses.dataclass(frozen=True)
class Launch:
    """One launch's options, resolved: every option (ours, Beam's, the runners'), the names the
    caller set explicitly (also where set to their default), the runner kind and the number of
    local worker processes (0: none; the runner then runs the job in this process)."""
    beam: PipelineOptions
    given: frozenset[str]
    runner: RunnerKind
    workers: int
    dry_run: bool = False   # --dry_run=true without --plan_only: a Dataflow job described.
    help: bool = False      # -h or --help: nothing runs.

    @property
    def converter(self) -> ConverterOptions:
        return self.beam.view_as(ConverterOptions)

    @property
    def remote(self) -> bool:
        """Whether the job is handed to a service that runs it without this process (its commit
        step then releases the output lock)."""
        return self.runner.remote

    @property
    def template_location(self) -> str | None:
        """Where a Flex Template launcher asks the job description to go (nothing runs here)."""
        return self.beam.view_as(GoogleCloudOptions).template_location

    @property
    def temp_location(self) -> str | None:
        return self.beam.view_as(GoogleCloudOptions).temp_location

    @property
    def runner_name(self) -> str:
        """--runner as given (DirectRunner when left out), for the lines that name it."""
        return runner_name(self.beam)

    @property
    def verbose(self) -> bool:
        return bool(self.converter.verbose)

    def replaced(self, **values) -> 'Launch':
        """The same launch with these option values (by name), resolved and checked again."""
        return resolve([], **dict(self.beam.get_all_options(drop_default=True), **values))


def resolve(flags: Sequence[str] = (), **values) -> Launch:
    """Command-line `flags` and keyword `values` by option name (which take precedence),
    resolved and checked (`validate`): an unknown name, a bad value or a number out of range is
    a DatasetError naming the flag."""
    flags = list(flags)
    if '-h' in flags or '--help' in flags:
        return Launch(PipelineOptions([]), frozenset(), RunnerKind.LOCAL, 0, help=True)
    given = _given_flags(flags) | set(values)
    _check_names(values)
    beam = PipelineOptions(flags, **values)
    runner = runner_kind(beam)
    if runner is RunnerKind.LOCAL and 'direct_running_mode' not in given:
        direct = beam.view_as(DirectOptions)   # Worker processes: --direct_num_workers, or a core each.
        direct.direct_running_mode = 'multi_processing'
        if 'direct_num_workers' not in given:
            direct.direct_num_workers = 0
    if runner is RunnerKind.DATAFLOW:
        dataflow.apply_worker_defaults(beam, given)
    if 'pipeline_type_check' not in given:   # Beam's checks of the graph's own type hints.
        beam.view_as(TypeOptions).pipeline_type_check = False
    dry_run = _dry_run(beam) and not beam.view_as(ConverterOptions).plan_only
    launch = Launch(beam, frozenset(given), runner, 0 if dry_run else _local_workers(beam, runner),
                    dry_run)
    validate(launch)
    return launch


def _dry_run(beam: PipelineOptions) -> bool:
    """--dry_run, which Beam takes as text: true or false (a DatasetError for other text)."""
    value = beam.view_as(TestOptions).dry_run
    try:
        return parse_bool(value) if isinstance(value, str) else bool(value)
    except argparse.ArgumentTypeError as exc:
        raise DatasetError(f'--dry_run: {exc}') from None


def _local_workers(beam: PipelineOptions, runner: RunnerKind) -> int:
    """The worker processes a local run starts: --direct_num_workers (0 or not given: one per
    core) in multi-process mode, the default; none in another mode."""
    direct = beam.view_as(DirectOptions)
    if runner is not RunnerKind.LOCAL or direct.direct_running_mode != 'multi_processing':
        return 0
    return direct.direct_num_workers or os.cpu_count() or 1


def validate(launch: Launch) -> None:
    """Every check of the options that needs no I/O, in one place (the input kinds' own through
    InputKind.check, the formats' through shard_formats): a DatasetError naming the flag."""
    opts = launch.converter
    direct = launch.beam.view_as(DirectOptions)
    checks = [
        (1 <= opts.jpeg_quality <= 100, '--jpeg_quality must be 1..100'),
        (opts.num_shards >= 0, '--num_shards must be >= 0 (0: automatic)'),
        (opts.target_shard_mb > 0, '--target_shard_mb must be > 0'),
        (0 <= opts.max_error_ratio <= 1, '--max_error_ratio must be in 0..1'),
        (0 <= opts.label_offset < MAX_LABEL_ID,
         f'--label_offset must be 0..{MAX_LABEL_ID - 1:,} (label ids are below {MAX_LABEL_ID:,})'),
        (opts.max_pixels >= 0 and opts.max_side >= 0, '--max_pixels/--max_side must be >= 0'),
        (opts.reads_in_flight <= MAX_READS_IN_FLIGHT,
         f'--reads_in_flight must be 1..{MAX_READS_IN_FLIGHT}'),
        (0 <= (direct.direct_num_workers or 0) <= MAX_WORKERS,
         f'--direct_num_workers must be 0..{MAX_WORKERS} (0: one per core)'),
    ]
    for ok, message in checks:
        if not ok:
            raise DatasetError(message)
    formats = shard_formats.parse(opts.output_format)   # An unknown or repeated format.
    if opts.dali_index and dali_index.FORMAT not in formats:
        raise DatasetError(f'--dali_index indexes TFRecord shards and --output_format='
                           f'{opts.output_format} writes none; add tfrecord to --output_format '
                           'or leave --dali_index out')
    if launch.dry_run and launch.runner is not RunnerKind.DATAFLOW:
        raise DatasetError('--dry_run checks a Dataflow job without submitting it; for a local run '
                           'use --plan_only to see what it would write')
    if launch.runner is RunnerKind.DATAFLOW:   # A Flex Template launcher names its own folders.
        if not launch.template_location:
            dataflow.check_flags(launch.beam, launch.dry_run)
        dataflow.check_paths(opts.output_dir, registry.input_paths(opts), launch.dry_run)
    if opts.plan_only and launch.runner is not RunnerKind.LOCAL and not launch.temp_location:
        raise DatasetError('--plan_only on this runner needs --temp_location (a gs:// folder the '
                           'job writes its plan to)')
    if opts.detach and not launch.remote:
        raise DatasetError('--detach hands a job to a service that runs it alone (Dataflow, or a '
                           'job server at host:port with workers of its own); this runner runs '
                           'it in this command')
    if opts.output_dir:
        _check_output_name(opts.output_dir)
    _check_path_names(launch)
    for kind in registry.kinds():
        kind.check(opts)


def _check_output_name(output_dir: str) -> None:
    if any(c in output_dir for c in '*?['):
        raise DatasetError(f'--output_dir {printable(output_dir)} contains a glob character '
                           '(*, ? or [); choose a folder name without them')


_SCHEME = re.compile(r'([A-Za-z][A-Za-z0-9+.-]*):/')


def _check_path_names(launch: Launch) -> None:
    """Every path given is local or gs://, and a gs:// one names a bucket Cloud Storage could
    hold: a typo is refused here, not met after retries against the service (or written to a
    local folder named gs:)."""
    cloud, opts = launch.beam.view_as(GoogleCloudOptions), launch.converter
    named = [('--output_dir', opts.output_dir), ('--temp_location', cloud.temp_location),
             ('--staging_location', cloud.staging_location), ('--labels_file', opts.labels_file),
             *(('input', path) for path in registry.input_paths(opts))]
    for flag, path in named:
        if not path:
            continue
        scheme = _SCHEME.match(path)
        if scheme and not path.startswith('gs://'):
            raise DatasetError(f'{flag} {printable(path)}: paths are local or gs://BUCKET/... '
                               f'(not {scheme.group(1)}:/...)')
        problem = path.startswith('gs://') and gcs.bucket_name_problem(path)
        if problem:
            raise DatasetError(f'{flag} {printable(path)}: {problem}')


def _all_options_parser() -> argparse.ArgumentParser:
    """A parser of every flag any Beam options class (ours, Beam's, the runners') defines,
    reporting a bad value as a DatasetError, not a usage page."""
    return beam_internals.options_parser(_bad_flag)


def _bad_flag(message: str):
    raise DatasetError(f'{message.replace("argument ", "flag ", 1)}; python -m pipeline.run '
                       '--help lists every flag')


def _given_flags(argv: list[str]) -> set[str]:
    """The option names `argv` sets, also where it sets them to their default value; an unknown
    flag or a bad value is a DatasetError naming it, with the nearest valid flag."""
    parser = _all_options_parser()
    for action in parser._actions:
        action.default = argparse.SUPPRESS
    given, unknown = parser.parse_known_args(argv)
    for arg in unknown:
        name = arg.split('=', 1)[0]
        if not name.startswith('-'):
            raise DatasetError(f'unexpected argument {arg!r}: flags look like --name=value')
        known = [option for action in parser._actions for option in action.option_strings]
        near = difflib.get_close_matches(name.replace('-', '_').replace('__', '--', 1), known, 1)
        hint = f'; did you mean {near[0]}?' if near else ''
        raise DatasetError(f'unknown flag {name}{hint} (python -m pipeline.run --help lists the '
                           'flags; Beam and runner flags are accepted as well)')
    return set(vars(given))


def _check_names(values: dict) -> None:
    """Raises a DatasetError naming the first option name (a keyword of the job API) that no
    options class defines, with the nearest valid one."""
    known = {action.dest for action in _all_options_parser()._actions}
    for name in values:
        if name not in known:
            near = difflib.get_close_matches(name, known, 1)
            raise DatasetError(f'unknown option {name!r}'
                               + (f'; did you mean {near[0]!r}?' if near else ''))
