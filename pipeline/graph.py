"""The Beam pipeline, built from plain arguments and returned unrun (so it can be dry-run).

    partitions -> list examples (on workers) -> facts & label map, shard plan (small combines)
               -> group example refs by chunk -> fingerprint chunks and shards (for resume)
               -> read, convert, write each chunk's part file
               -> group part files by shard -> concatenate -> commit
"""
import dataclasses
import logging

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from transforms import fileio, resume
from transforms.commit import commit_dataset
from transforms.labels import CombineFacts, DatasetFacts, LabelMap, check_facts, resolve_labels
from transforms.listing import FolderSplit, Partition
from transforms.refs import ExampleRef
from transforms.settings import ConversionSettings
from transforms.sharding import AssignChunks, CombineBuckets, plan_shards
from transforms.write_shards import ConcatenateShard, EncodeChunk, ShardResult

LOG = logging.getLogger('image_tfrecords')


def _split_further(partition: Partition) -> list[Partition]:
    return partition.split_further()


def _examples(partition: Partition):
    return partition.examples()


def _measure_size(ref: ExampleRef) -> ExampleRef:
    if ref.size is not None or ref.problem is not None:
        return ref
    found = fileio.match(ref.source) if ref.source else []
    return dataclasses.replace(ref, size=found[0].size_in_bytes if found else 0,
                               mtime=found[0].last_updated_in_seconds if found else None)


def _labels(facts: DatasetFacts, settings: ConversionSettings) -> LabelMap:
    check_facts(facts, settings.splits)
    return resolve_labels(facts, settings.labels)


def _by_split(ref: ExampleRef):
    return ref.split, ref


def _plan(split_stats, settings: ConversionSettings):
    split, stats = split_stats
    if settings.num_shards > stats[0]:
        LOG.warning('%s: --num_shards %d is more than its %d inputs; writing at most one shard '
                    'per input', split, settings.num_shards, stats[0])
    return split, plan_shards(stats, settings.num_shards, settings.target_shard_mb)


def _shard_key(result: ShardResult):
    return (result.split, result.shard), result


def _is_input(ref: ExampleRef) -> bool:
    return not ref.ignored


def _chunk_fingerprint(chunk, run_id: str, label_map: LabelMap):
    (split, shard, index), groups = chunk
    refs = [r for group in groups for r in group]
    return (split, shard), (index, resume.chunk_fingerprint(run_id, label_map, chunk[0], refs))


def _shard_fingerprint(shard_chunks):
    key, chunks = shard_chunks
    return key, resume.shard_fingerprint(chunks)


def build_pipeline(options: PipelineOptions, partitions: list[Partition],
                   settings: ConversionSettings) -> beam.Pipeline:
    """The conversion of `partitions` into a committed dataset under settings.output_dir."""
    p = beam.Pipeline(options=options)
    listed = (p
              | 'Create Partitions' >> beam.Create(partitions)
              | 'Split Partitions' >> beam.FlatMap(_split_further)
              | 'Spread Partitions' >> beam.Reshuffle()
              | 'List Examples' >> beam.FlatMap(_examples))
    facts = listed | 'Combine Facts' >> beam.CombineGlobally(CombineFacts())
    refs = listed | 'Drop Ignored' >> beam.Filter(_is_input)
    if not settings.num_shards and not all(isinstance(x, FolderSplit) for x in partitions):
        refs = (refs
                | 'Spread Examples' >> beam.Reshuffle()
                | 'Measure Sizes' >> beam.Map(_measure_size))
    label_map = facts | 'Resolve Labels' >> beam.Map(_labels, settings)
    plans = (refs
             | 'Key By Split' >> beam.Map(_by_split)
             | 'Combine Buckets' >> beam.CombinePerKey(CombineBuckets())
             | 'Plan Shards' >> beam.Map(_plan, settings))
    chunks = (refs
              | 'Assign Chunks' >> beam.ParDo(AssignChunks(), plans=beam.pvalue.AsDict(plans))
              | 'Group By Chunk' >> beam.GroupByKey())
    shard_fps = beam.pvalue.AsDict(
        chunks
        | 'Fingerprint Chunks' >> beam.Map(_chunk_fingerprint, settings.run_id,
                                           label_map=beam.pvalue.AsSingleton(label_map))
        | 'Group Fingerprints' >> beam.GroupByKey()
        | 'Fingerprint Shards' >> beam.Map(_shard_fingerprint))
    results = (chunks
               | 'Encode Chunks' >> beam.ParDo(EncodeChunk(settings),
                                               label_map=beam.pvalue.AsSingleton(label_map),
                                               shard_fps=shard_fps)
               | 'Key By Shard' >> beam.Map(_shard_key)
               | 'Group By Shard' >> beam.GroupByKey()
               | 'Concatenate Shards' >> beam.ParDo(ConcatenateShard(settings),
                                                    plans=beam.pvalue.AsDict(plans),
                                                    shard_fps=shard_fps))
    _ = (results
         | 'Collect Results' >> beam.combiners.ToList()
         | 'Commit Dataset' >> beam.Map(commit_dataset,
                                        label_map=beam.pvalue.AsSingleton(label_map),
                                        facts=beam.pvalue.AsSingleton(facts),
                                        settings=settings))
    return p
