"""The Beam pipeline, built from plain arguments and returned unrun (so it can be dry-run).

    partitions -> List Examples (on workers): inputs spilled into sorted runs, a Listed per
                  bundle (with the run's sample) -> Resolve Labels: facts and label map (small)
                          -> Plan Shards: the sample converted (Measure Sample, unless
                             --num_shards is given) to size the shards by their output, and a
                             shard plan per split (small)
               -> Write Shards: the plans' chunks cut into tasks; each task's inputs read from
                  the runs, fingerprinted, converted into part files; their hashes clustered
                  across splits (Find Leakage); parts joined per shard
               -> Commit Dataset
(and, for a launcher that waits for the job, Note Plan: the plan, for its progress display)

A plan-only job (`--plan_only`) lists and plans, writing no run, and writes the plan instead,
its sample converted as the conversion converts it (so it plans the same shards), and timed on a
local runner for the conversion rate here (transforms/local_rate.py).
"""
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineRunner

from pipeline.errors import beam_refusal
from pipeline.plan import write_plan
from pipeline.output import layout
from transforms.commit import CommitDataset
from transforms.labels import ResolveLabels
from pipeline.inputs.kinds import Partition
from transforms.listing import ListExamples
from transforms.local_rate import SAMPLE_SIZE, MeasureSample
from pipeline.base.settings import ConversionSettings
from transforms.sharding import PlanShards
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
    facts, label_map, plans, _ = _plan(listed, settings, sample=sized)
    if settings.lock_token:   # For the progress of the launcher that waits (or --attach).
        plans = _note_plan(facts, label_map, plans,
                           layout.plan_note(settings.temp_dir, settings.lock_token))
    written = listed | 'Write Shards' >> WriteShards(settings, plans, label_map)
    _ = written['shards'] | 'Commit Dataset' >> CommitDataset(settings, label_map, facts, written)
    return p


def _conversion_measures_sizes(partitions: list[Partition], settings: ConversionSettings) -> bool:
    """Whether a conversion's listing measures a sample of the sizes it is not given: where
    they size the shards (not with --num_shards). What it measures is part of its listing
    fingerprints, so a listing compared with them measures the same."""
    return not settings.num_shards and not all(x.sizes_known for x in partitions)


def _note_plan(facts: beam.PCollection, label_map: beam.PCollection, plans: beam.PCollection,
               path: str) -> beam.PCollection:
    """The shard plans, once the plan document is written to `path`: so before any chunk is
    converted."""
    noted = facts | 'Note Plan' >> beam.Map(write_plan, beam.pvalue.AsSingleton(label_map),
                                            beam.pvalue.AsDict(plans), path)
    return plans | 'Plan Noted' >> beam.Map(lambda plan, _: plan, beam.pvalue.AsSingleton(noted))


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
    facts, label_map, plans, measured = _plan(listed, settings, sample, timed=measure_rate)
    _ = facts | 'Write Plan' >> beam.Map(write_plan, beam.pvalue.AsSingleton(label_map),
                                         beam.pvalue.AsDict(plans), plan_path,
                                         *([beam.pvalue.AsSingleton(measured)] if sample else []))
    return p


def _plan(listed: beam.PCollection, settings: ConversionSettings, sample: bool,
          timed: bool = False) -> tuple:
    """(facts, label map, shard plans, the sample's measurement or None) of what listing found;
    with `sample`, the shards are sized from a converted sample of the inputs (timed too if
    `timed`)."""
    facts, label_map = listed | 'Resolve Labels' >> ResolveLabels(settings.splits, settings.labels)
    planner = PlanShards(settings.num_shards, settings.target_shard_mb,
                         MeasureSample(settings, label_map, timed) if sample else None)
    plans = listed | 'Plan Shards' >> planner
    return facts, label_map, plans, planner.sample
