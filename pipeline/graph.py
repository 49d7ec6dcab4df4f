"""The Beam pipeline, built from plain arguments and returned unrun (so it can be dry-run).

Six stages, each a composite whose docstring says what crosses it. No image passes through the
runner: the workers pass small descriptions (runs, plans, tasks, part and shard results), and
the data lives in files of the run's temporary folder.

    partitions -> List Examples (on workers): inputs spilled into sorted runs; a Listed per
                  bundle (counts, key-hash bits, facts, its share of the sample)
               -> Plan Conversion (one call): label ids, the sample converted to size the
                  shards (unless --num_shards), a shard plan per split; one Plan, written for
                  the launcher's progress display before the call returns
               -> Encode Chunks (tasks spread over the workers): each task's chunks read from
                  the runs and converted into part files, their records filed for the checks;
                  a PartDone per part, keyed by its shard, and a Filed per bundle
               -> Check Quality (link tasks, then clusters and copy counts, spread): the
                  clusters of near-duplicates across splits, written as parts of
                  leakage.jsonl, and the exact copies' counts (with --leakage=drop, the
                  copies left out, which the shards' join takes out)
               -> Write Shards (grouped by shard): parts joined into each output format
               -> Commit Dataset (one call): metadata, reports, the moves into place; the
                  summary

A plan-only job (`--plan_only`) lists and plans, writing no run, and writes the plan instead,
its sample converted as the conversion converts it (so it plans the same shards), and timed on a
local runner for the conversion rate here (transforms/local_rate.py).
"""
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineRunner

from pipeline.errors import beam_refusal
from pipeline.output import layout
from transforms.check_quality import CheckQuality
from transforms.commit import CommitDataset
from transforms.encode_chunks import EncodeTasks
from pipeline.inputs.kinds import Partition
from transforms.listing import ListExamples
from transforms.local_rate import SAMPLE_SIZE
from pipeline.base.settings import ConversionSettings
from transforms.planning import PlanConversion
from transforms.write_shards import WriteShards


def build_pipeline(runner: PipelineRunner | None, options: PipelineOptions,
                   partitions: list[Partition], settings: ConversionSettings) -> beam.Pipeline:
    """The conversion of `partitions` into a committed dataset under settings.output_dir, to
    run on `runner` (None: the one --runner names)."""
    try:
        p = beam.Pipeline(runner=runner, options=options)
    except ValueError as exc:   # Beam's checks of a service runner's options.
        raise (beam_refusal(exc) or exc) from None
    sized = not settings.num_shards   # Shards sized by the output of a converted sample.
    listed = p | 'List Examples' >> ListExamples(
        partitions, layout.listed_folder(settings.temp_dir),
        _conversion_measures_sizes(partitions, settings),
        groups_in=settings.temp_dir, resuming=settings.resuming, key=settings.resume_key,
        sample_size=SAMPLE_SIZE if sized else 0)
    note = (layout.plan_note(settings.temp_dir, settings.lock_token)
            if settings.lock_token else None)   # For the launcher that waits (or --attach).
    plan = listed | 'Plan Conversion' >> PlanConversion(settings, sized, note=note,
                                                        names=True)
    encoded = plan | 'Encode Chunks' >> EncodeTasks(settings)
    checked = plan | 'Check Quality' >> CheckQuality(settings, encoded['filed'])
    shards = encoded['parts'] | 'Write Shards' >> WriteShards(settings, plan,
                                                              checked.get('dropped'))
    _ = shards | 'Commit Dataset' >> CommitDataset(settings, plan, encoded['filed'], checked)
    return p


def _conversion_measures_sizes(partitions: list[Partition], settings: ConversionSettings) -> bool:
    """Whether a conversion's listing measures a sample of the sizes it is not given: where
    they size the shards (not with --num_shards). What it measures is part of its listing
    fingerprints, so a listing compared with them measures the same."""
    return not settings.num_shards and not all(x.sizes_known for x in partitions)


def build_plan_pipeline(runner: PipelineRunner | None, options: PipelineOptions,
                        partitions: list[Partition], settings: ConversionSettings,
                        plan_path: str, measure_rate: bool = False,
                        sample: bool = True) -> beam.Pipeline:
    """Lists and plans without converting: the plan document goes to `plan_path`, with what a
    converted sample of the inputs weighs and, if `measure_rate`, this machine's conversion rate
    for it. Unless `sample`: the listing alone, as the conversion lists (the same sizes
    measured, so the same listing fingerprints)."""
    try:
        p = beam.Pipeline(runner=runner, options=options)
    except ValueError as exc:   # Beam's checks of a service runner's options.
        raise (beam_refusal(exc) or exc) from None
    measure_sizes = (not all(x.sizes_known for x in partitions) if sample
                     else _conversion_measures_sizes(partitions, settings))
    listed = p | 'List Examples' >> ListExamples(
        partitions, None, measure_sizes, sample_size=SAMPLE_SIZE if sample else 0)
    _ = listed | 'Plan Conversion' >> PlanConversion(settings, sample, timed=measure_rate,
                                                     note=plan_path)
    return p
