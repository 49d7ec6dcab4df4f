"""What a stage makes of every element of a PCollection at once, on one worker.

`Gathered(fn, ...)` reads the PCollection as a list side input and calls fn(that list, ...)
once, from an Impulse. Beam's own way, `CombineGlobally(ToList())` followed by a Map, expands
into ten transforms and two more stages (a keyed group, then a default for an empty input);
this is two transforms in one stage, and an empty PCollection gives fn an empty list. The
order of the list is the runner's, as ToList's is: fn must not depend on it.
"""
from typing import Any, Callable

import apache_beam as beam


class Gathered(beam.PTransform):
    """PCollection -> one element, fn(a list of all its elements, *args, **kwargs); with
    `each`, fn's result is an iterable and its items are the elements. Side inputs may be
    among args and kwargs, as for beam.Map."""

    def __init__(self, fn: Callable[..., Any], *args, each: bool = False, **kwargs):
        super().__init__()
        self._fn, self._args, self._kwargs, self._each = fn, args, kwargs, each

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        fn = self._fn
        call = beam.FlatMap if self._each else beam.Map
        return (pcoll.pipeline
                | 'Once' >> beam.Impulse()
                | 'Call' >> call(lambda _, items, *args, **kwargs: fn(items, *args, **kwargs),
                                 beam.pvalue.AsList(pcoll), *self._args, **self._kwargs))
