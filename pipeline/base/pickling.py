"""Pickling of the small records that cross between workers by the thousand."""
import dataclasses
import operator


def values_only(cls: type) -> type:
    """Makes a dataclass pickle as its field values alone (no field names), read with one C
    call: refs and archive members are pickled several times each on their way through the
    pipeline."""
    values = operator.attrgetter(*(field.name for field in dataclasses.fields(cls)))
    cls.__reduce__ = lambda self: (cls, values(self))
    return cls
