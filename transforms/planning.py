"""Planning: what listing found, made into the plan every later stage reads, in one call.

PlanConversion gathers the bundles' Listed (listing.py: small, a few bytes an input) on one
worker and, in turn, combines their facts and fixes the label ids (labels.py: a DatasetError for
an empty split, an unknown label, ...), converts the sample of the inputs to weigh their records
(local_rate.py; not with --num_shards) and cuts each split's shard plan from its count, sizes
and key-hash histogram (sharding.py). One element crosses it, the Plan; the tasks of the stages
after it are cut from it where they are spread (sharding.dealt_tasks, leakage.link_tasks,
copies.copy_ranges). Where asked, the call also writes the plan document (plan_note.py): for
the launcher that waits, its progress display's totals and class names, written before the call
returns and so before any chunk is converted; for a plan-only job, the plan itself.
"""
import dataclasses

import apache_beam as beam

from pipeline.base.settings import ConversionSettings
from transforms.plan_note import write_plan
from transforms import local_rate, sharding
from transforms.gathered import gather
from transforms.labels import DatasetFacts, LabelMap, combined_facts, label_map_of
from transforms.listing import Listed


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the stages after planning read of it: the facts of every input, the label ids, a
    shard plan per split, and the listing's sorted runs (descriptions: the refs are in files)."""
    facts: DatasetFacts
    label_map: LabelMap
    shard_plans: dict[str, sharding.ShardPlan]
    runs: list


class PlanConversion(beam.PTransform):
    """Listed (a bundle's listing, listing.py) -> one Plan (see the module docstring).
    `sample`: the shards are sized by the records of a converted sample, else by the input
    bytes; `timed`: the sample's conversion is timed too (a plan on a local runner);
    `note`: where to write the plan document (None: nowhere), with the class name of every id
    if `names` (the conversion's note, which the launcher compares with a replaced dataset's)."""

    def __init__(self, settings: ConversionSettings, sample: bool, timed: bool = False,
                 note: str | None = None, names: bool = False):
        super().__init__()
        self._settings, self._sample, self._timed = settings, sample, timed
        self._note, self._names = note, names

    def expand(self, listed: beam.PCollection) -> beam.PCollection:
        return gather(listed, plan_conversion, self._settings, self._sample, self._timed,
                      self._note, self._names, name='Plan')


def plan_conversion(listed: list[Listed], settings: ConversionSettings, sample: bool,
                    timed: bool, note: str | None, names: bool = False) -> Plan:
    """The Plan of what every bundle listed (see the module docstring)."""
    facts = combined_facts(found.facts for found in listed)
    label_map = label_map_of(facts, settings.splits, settings.labels)
    measured = local_rate.measure_sample(listed, label_map, settings, timed) if sample else None
    shard_plans = sharding.shard_plans(listed, settings.num_shards, settings.target_shard_mb,
                                       measured)
    if note:
        write_plan(facts, label_map, shard_plans, note, measured, label_names=names)
    return Plan(facts, label_map, shard_plans, [run for found in listed for run in found.runs])
