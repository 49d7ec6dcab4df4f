"""Spreading a PCollection's elements over the workers.

`Spread()` gives each element a random key, groups by it and drops the keys: a fusion break, so
the elements after it are processed where the runner places their keys instead of where the
step before made them (a FlatMap fanning out tasks runs on one worker). `Spread(fan_out, ...)`
is that fan-out and its spreading in one: the elements of fan_out(element, ...) of each element,
keyed as they are made. `beam.Reshuffle` does the same with four steps around the grouping, two
of them to carry each element's timestamp across it; every element here is in the global window
and its timestamp is never read, so two steps do. Each step costs every runner a DoFn's set-up
and the Dataflow graph a step.
"""
import random
from typing import Any, Callable, Iterable

import apache_beam as beam


class Spread(beam.PTransform):
    """PCollection -> the same elements, or with `fan_out` the elements of fan_out(element,
    *args) of each (side inputs may be among args, as for beam.FlatMap), redistributed over the
    workers (a fusion break)."""

    def __init__(self, fan_out: Callable[..., Iterable[Any]] | None = None, *args):
        super().__init__()
        self._fan_out, self._args = fan_out, args

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        fan_out = self._fan_out
        if fan_out is None:
            keyed = pcoll | 'Key' >> beam.Map(lambda element: (random.getrandbits(32), element))
        else:
            keyed = pcoll | 'Fan Out' >> beam.FlatMap(
                lambda element, *args: ((random.getrandbits(32), made)
                                        for made in fan_out(element, *args)), *self._args)
        return (keyed
                | 'Group' >> beam.GroupByKey()
                | 'Values' >> beam.FlatMap(lambda keyed: keyed[1]))
