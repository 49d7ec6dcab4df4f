"""What a stage makes of every element of a PCollection at once, on one worker.

`Gathered(fn, ...)` reads the PCollection as a list side input and calls fn(that list, ...)
once, from an Impulse. Beam's own way, `CombineGlobally(ToList())` followed by a Map, expands
into ten transforms and two more stages (a keyed group, then a default for an empty input);
this is two transforms in one stage, and an empty PCollection gives fn an empty list. The
order of the list is the runner's, as ToList's is: fn must not depend on it. A composite that
is such a call and nothing more applies the two steps itself (`gather`), under its own name.
"""
from typing import Any, Callable

import apache_beam as beam


def gather(pcoll: beam.PCollection, fn: Callable[..., Any], *args, each: bool = False,
           name: str = 'Call', **kwargs) -> beam.PCollection:
    """Gathered's two steps ('Once', then the call, named `name`), applied in the composite
    being expanded."""
    call = beam.FlatMap if each else beam.Map
    return (pcoll.pipeline
            | 'Once' >> beam.Impulse()
            | name >> call(lambda _, items, *args, **kwargs: fn(items, *args, **kwargs),
                             beam.pvalue.AsList(pcoll), *args, **kwargs))


class Gathered(beam.PTransform):
    """PCollection -> one element, fn(a list of all its elements, *args, **kwargs); with
    `each`, fn's result is an iterable and its items are the elements. Side inputs may be
    among args and kwargs, as for beam.Map."""

    def __init__(self, fn: Callable[..., Any], *args, each: bool = False, **kwargs):
        super().__init__()
        self._fn, self._args, self._kwargs, self._each = fn, args, kwargs, each

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        return gather(pcoll, self._fn, *self._args, each=self._each, **self._kwargs)
