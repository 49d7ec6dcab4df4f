"""The quality check: near-duplicates across splits (leakage.py) and exact copies within a split
(copies.py), found in the records the conversion filed into sorted runs, in two passes spread
over the workers; what crosses the stage is what the commit reports.

With the leakage check on, link tasks cut from the plan each read a band's range of every run
(LinkGroup), their links are joined on one worker into the clusters that span splits
(leakage.Spanning), and then one pass makes each partition's clusters, written as a part of
leakage.jsonl (findings.py), and counts each range of a split's digests for exact copies (with
--leakage=drop, without the copies the clusters leave out). With --leakage=off only the count
runs, on ranges cut from the plan.
"""
from typing import Iterator

import apache_beam as beam

from pipeline.base.choices import LeakageAction
from pipeline.base.settings import ConversionSettings
from transforms import copies, findings, leakage
from transforms.gathered import gather
from transforms.spread import Spread


class CheckQuality(beam.PTransform):
    """The plan (planning.Plan) -> a dict of PCollections: 'copies', the count of each range
    of a split's digests (copies.count_range), and with the leakage check on, 'clusters' (the
    findings.ClusterPart of each partition of the clusters that span splits), 'spanning' (one
    leakage.Spanning: those clusters' records, and the crowded buckets) and with
    --leakage=drop 'dropped' (each member of a cluster in a later split, keyed by its shard:
    leakage.by_shard).

    `filed`: the conversion's Filed (leakage.py), a side input of every task: the runs its
    records were filed into, and the fingerprints of their chunks."""

    def __init__(self, settings: ConversionSettings, filed: beam.PCollection):
        super().__init__()
        self._settings, self._filed = settings, filed

    def expand(self, plan: beam.PCollection) -> dict:
        settings = self._settings
        filed = beam.pvalue.AsList(self._filed)
        drop = settings.leakage == LeakageAction.DROP
        if settings.hashed:
            linked = (plan
                      | 'Link Tasks' >> Spread(leakage.link_tasks)
                      | 'Link Within Buckets' >> beam.ParDo(
                          leakage.LinkGroup(settings.temp_dir, settings.resuming,
                                            settings.resume_key), filed))
            spanning = gather(linked, leakage.join_links, drop, name='Join Links')
            tasks = spanning | 'Tasks' >> Spread(_tasks, beam.pvalue.AsSingleton(plan))
            sides = [beam.pvalue.AsSingleton(spanning)]
        else:
            tasks = plan | 'Tasks' >> Spread(copies.copy_ranges)
            sides = []
        found = tasks | 'Cluster And Count' >> beam.ParDo(
            ClusterAndCount(settings), filed, *sides).with_outputs(
                'copies', 'dropped', main='clusters')
        if not settings.hashed:
            return {'copies': found.copies}
        return {'clusters': found.clusters, 'copies': found.copies, 'spanning': spanning,
                **({'dropped': found.dropped} if drop else {})}


def _tasks(spanning: leakage.Spanning, plan) -> Iterator:
    """Every partition of the clusters, then every range of the count of copies."""
    yield from leakage.cluster_partitions(spanning)
    yield from copies.copy_ranges(plan)


class ClusterAndCount(beam.DoFn):
    """A leakage.ClusterPartition -> its clusters, written as a part of leakage.jsonl: its
    findings.ClusterPart, and with --leakage=drop on the 'dropped' output each member left out
    (leakage.by_shard); a copies.CopyRange -> its count on the 'copies' output
    (copies.count_range)."""

    def __init__(self, settings: ConversionSettings):
        self._settings = settings

    def process(self, task, filed: list, spanning: leakage.Spanning | None = None) -> Iterator:
        settings = self._settings
        if isinstance(task, copies.CopyRange):
            left_out = spanning.later if spanning is not None else None
            yield beam.pvalue.TaggedOutput('copies', copies.count_range(
                task, leakage.filed_runs(filed), left_out))
            return
        made = leakage.partition_clusters(task, spanning, settings.temp_dir,
                                          leakage.filed_chunks(filed), settings.resume_key)
        if not made:
            return
        if settings.leakage == LeakageAction.DROP:
            for copy in leakage.dropped_copies(made):
                yield beam.pvalue.TaggedOutput('dropped', leakage.by_shard(copy))
        yield findings.write_part(made, settings.temp_dir)
