"""The listing fingerprint a rerun compares (refs.listing_hash summed per split in DatasetFacts):
independent of listing order and of how the listing is split among workers, and changed by an
input added, removed, resized or relabelled."""
from transforms.labels import DatasetFacts
from pipeline.base.refs import ExampleRef


def _refs(sizes: dict) -> list[ExampleRef]:
    return [ExampleRef('train', key, f'/in/{key}', key, label, size=size)
            for key, (size, label) in sizes.items()]


def _fingerprint(*parts: list[ExampleRef]) -> str:
    merged = DatasetFacts()
    for refs in parts:
        facts = DatasetFacts()
        for ref in refs:
            facts.add(ref)
        merged.merge(facts)
    return merged.listing_fingerprint('train')


INPUTS = {f'c{i % 2}/{i}.jpg': (1000 + i, f'c{i % 2}') for i in range(6)}


def test_the_fingerprint_does_not_depend_on_order_or_workers():
    refs = _refs(INPUTS)
    assert _fingerprint(refs) == _fingerprint(refs[::-1]) == _fingerprint(refs[:2], refs[2:])


def test_an_input_added_removed_resized_or_relabelled_changes_it():
    base = _fingerprint(_refs(INPUTS))
    changed = [dict(INPUTS, **{'c0/new.jpg': (5, 'c0')}),
               {k: v for k, v in INPUTS.items() if k != 'c0/0.jpg'},
               dict(INPUTS, **{'c0/0.jpg': (999, 'c0')}),
               dict(INPUTS, **{'c0/0.jpg': (1000, 'c1')})]
    assert len({base, *(_fingerprint(_refs(inputs)) for inputs in changed)}) == 5
