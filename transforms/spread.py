"""Spreading a PCollection's elements over the workers.

`Spread()` gives each element a random key, groups by it and drops the keys: a fusion break, so
the elements after it are processed where the runner places their keys instead of where the
step before made them (a FlatMap fanning out tasks runs on one worker). `beam.Reshuffle` does
the same with four steps around the grouping, two of them to carry each element's timestamp
across it; every element here is in the global window and its timestamp is never read, so two
steps do. Each step costs every runner a DoFn's set-up and the Dataflow graph a step.
"""
import random

import apache_beam as beam


class Spread(beam.PTransform):
    """PCollection -> the same elements, redistributed over the workers (a fusion break)."""

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        return (pcoll
                | 'Key' >> beam.Map(lambda element: (random.getrandbits(32), element))
                | 'Group' >> beam.GroupByKey()
                | 'Values' >> beam.FlatMap(lambda keyed: keyed[1]))
