"""How much a JSON text can make, counted on its bytes in C before it is parsed: json.loads
makes an object of every value, and a value can take far more memory than its text (`{}` is 2
bytes, the dict it makes about 64; `{"":{"":...}}` nests a dict per 5 bytes and holds no comma),
so a bound on a file's bytes alone is no bound on what parsing it takes.
"""


def counts(data: bytes) -> tuple[int, int]:
    """(objects and arrays, values) that `data` can hold at most: its opening brackets (or its
    closing ones, if more), and those plus its commas and colons, each a value or a key; inside
    strings they are counted too, so both are upper bounds."""
    containers = max(data.count(b'[') + data.count(b'{'), data.count(b']') + data.count(b'}'))
    return containers, containers + data.count(b',') + data.count(b':') + 1


def excess(data: bytes, max_containers: int, max_values: int) -> str | None:
    """What in `data` is past the bounds ('more than N JSON objects and arrays', or values), in
    words that follow 'holds'; None within them."""
    containers, values = counts(data)
    if containers > max_containers:
        return f'more than {max_containers:,} JSON objects and arrays'
    if values > max_values:
        return f'more than {max_values:,} JSON values'
    return None
