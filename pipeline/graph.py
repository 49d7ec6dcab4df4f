"""The Beam pipeline, built from plain arguments and returned unrun (so it can be dry-run).

    partitions -> List Examples (on workers) -> Resolve Labels: facts and label map (small)
               -> Plan Shards: a shard plan per split (small combines)
               -> Write Shards: refs grouped by chunk, fingerprinted, converted into part
                  files, joined per shard
               -> Commit Dataset
"""
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from transforms.commit import CommitDataset
from transforms.labels import ResolveLabels
from transforms.listing import ListExamples, Partition, is_input
from transforms.settings import ConversionSettings
from transforms.sharding import PlanShards
from transforms.write_shards import WriteShards


def build_pipeline(options: PipelineOptions, partitions: list[Partition],
                   settings: ConversionSettings) -> beam.Pipeline:
    """The conversion of `partitions` into a committed dataset under settings.output_dir."""
    p = beam.Pipeline(options=options)
    measure_sizes = not settings.num_shards and not all(x.sizes_known for x in partitions)
    listed = p | 'List Examples' >> ListExamples(partitions, measure_sizes)
    facts, label_map = listed | 'Resolve Labels' >> ResolveLabels(settings.splits, settings.labels)
    inputs = listed | 'Drop Ignored' >> beam.Filter(is_input)
    plans = inputs | 'Plan Shards' >> PlanShards(settings.num_shards, settings.target_shard_mb)
    shards = inputs | 'Write Shards' >> WriteShards(settings, plans, label_map)
    _ = shards | 'Commit Dataset' >> CommitDataset(settings, label_map, facts)
    return p
