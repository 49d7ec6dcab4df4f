"""The Beam pipeline, built from plain arguments and returned unrun (so it can be dry-run).

    partitions -> list examples (on workers) -> facts & label map, shard plan (small combines)
               -> group example refs by chunk -> read, convert, write each chunk's part file
               -> group part files by shard -> concatenate -> commit
"""
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from transforms import fileio
from transforms.commit import commit_dataset
from transforms.labels import CombineFacts, DatasetFacts, LabelMap, check_facts, resolve_labels
from transforms.listing import FolderSplit, Partition
from transforms.refs import ExampleRef
from transforms.settings import ConversionSettings
from transforms.sharding import AssignChunks, CombineBuckets, plan_shards
from transforms.write_shards import ConcatenateShard, EncodeChunk, ShardResult


def _split_further(partition: Partition) -> list[Partition]:
    return partition.split_further()


def _examples(partition: Partition):
    return partition.examples()


def _measure_size(ref: ExampleRef) -> ExampleRef:
    if ref.size is not None or ref.problem is not None:
        return ref
    found = fileio.match(ref.source) if ref.source else []
    size = found[0].size_in_bytes if found else 0
    return ExampleRef(**{**ref.__dict__, 'size': size})


def _labels(facts: DatasetFacts, settings: ConversionSettings) -> LabelMap:
    check_facts(facts, settings.splits)
    return resolve_labels(facts, settings.labels)


def _by_split(ref: ExampleRef):
    return ref.split, ref


def _plan(split_stats, settings: ConversionSettings):
    split, stats = split_stats
    return split, plan_shards(stats, settings.num_shards, settings.target_shard_mb)


def _shard_key(result: ShardResult):
    return (result.split, result.shard), result


def build_pipeline(options: PipelineOptions, partitions: list[Partition],
                   settings: ConversionSettings) -> beam.Pipeline:
    """The conversion of `partitions` into a committed dataset under settings.output_dir."""
    p = beam.Pipeline(options=options)
    refs = (p
            | 'Create Partitions' >> beam.Create(partitions)
            | 'Split Partitions' >> beam.FlatMap(_split_further)
            | 'Spread Partitions' >> beam.Reshuffle()
            | 'List Examples' >> beam.FlatMap(_examples))
    if not settings.num_shards and not all(isinstance(x, FolderSplit) for x in partitions):
        refs = (refs
                | 'Spread Examples' >> beam.Reshuffle()
                | 'Measure Sizes' >> beam.Map(_measure_size))
    facts = refs | 'Combine Facts' >> beam.CombineGlobally(CombineFacts())
    label_map = facts | 'Resolve Labels' >> beam.Map(_labels, settings)
    plans = (refs
             | 'Key By Split' >> beam.Map(_by_split)
             | 'Combine Buckets' >> beam.CombinePerKey(CombineBuckets())
             | 'Plan Shards' >> beam.Map(_plan, settings))
    results = (refs
               | 'Assign Chunks' >> beam.ParDo(AssignChunks(), plans=beam.pvalue.AsDict(plans))
               | 'Group By Chunk' >> beam.GroupByKey()
               | 'Encode Chunks' >> beam.ParDo(EncodeChunk(settings),
                                               label_map=beam.pvalue.AsSingleton(label_map))
               | 'Key By Shard' >> beam.Map(_shard_key)
               | 'Group By Shard' >> beam.GroupByKey()
               | 'Concatenate Shards' >> beam.ParDo(ConcatenateShard(settings),
                                                    plans=beam.pvalue.AsDict(plans)))
    _ = (results
         | 'Collect Results' >> beam.combiners.ToList()
         | 'Commit Dataset' >> beam.Map(commit_dataset,
                                        label_map=beam.pvalue.AsSingleton(label_map),
                                        facts=beam.pvalue.AsSingleton(facts),
                                        settings=settings))
    return p
