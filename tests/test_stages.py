"""Each stage of the pipeline alone, on Beam's in-process runner (TestPipeline + assert_that):
what the end-to-end tests only imply, pinned where it is decided."""
import collections

import apache_beam as beam
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from pipeline.formats import records
from tests import imagemaker
from tests.helpers import write_tree
from transforms.labels import ResolveLabels
from transforms.listing import ListExamples
from transforms.refs import ExampleRef
from transforms.settings import ConversionSettings, LabelSettings
from transforms.sharding import AssignChunks, PlanShards
from transforms.write_shards import WriteShards


def _refs(n: int, split: str = 'train') -> list[ExampleRef]:
    return [ExampleRef(split, f'/data/{split}/img{i}.jpg', f'/data/{split}/img{i}.jpg',
                       f'img{i}.jpg', f'c{i % 3}', 1000) for i in range(n)]


def _shard_sizes(plans):
    """(split, sorted examples per shard) of the plans, counting the refs of _refs()."""
    out = []
    for split, plan in plans:
        per_shard = collections.Counter(plan.chunk_of(r)[0] for r in _refs(1000, split))
        out.append((split, plan.num_shards, sorted(per_shard.values())))
    return out


def test_plan_shards_honours_the_shard_count_with_even_shards():
    with test_pipeline.TestPipeline() as p:
        plans = (p | beam.Create(_refs(1000) + _refs(7, 'test'))
                 | PlanShards(num_shards=4, target_shard_mb=128))
        sizes = plans | beam.Map(lambda plan: _shard_sizes([plan])[0])
        assert_that(sizes | beam.Filter(lambda s: s[0] == 'train')
                    | beam.Map(lambda s: (s[1], len(s[2]), min(s[2]) >= 230, max(s[2]) <= 270)),
                    equal_to([(4, 4, True, True)]), label='train: 4 even shards')
        assert_that(plans | beam.Filter(lambda kv: kv[0] == 'test')
                    | beam.Map(lambda kv: kv[1].num_shards),
                    equal_to([4]), label='test: 7 inputs, 4 shards')


def test_plan_shards_targets_a_shard_size_and_never_more_shards_than_inputs():
    refs = _refs(1000)   # 1000 x 1000 bytes: about 1 MB.
    with test_pipeline.TestPipeline() as p:
        counts = (p | beam.Create(refs) | PlanShards(num_shards=0, target_shard_mb=0.25)
                  | beam.Map(lambda kv: kv[1].num_shards))
        assert_that(counts, equal_to([4]))
    with test_pipeline.TestPipeline() as p:
        counts = (p | beam.Create(refs[:3]) | PlanShards(num_shards=100, target_shard_mb=128)
                  | beam.Map(lambda kv: kv[1].num_shards))
        assert_that(counts, equal_to([3]))


def test_assign_chunks_puts_every_ref_in_exactly_one_chunk_of_its_shard():
    refs = _refs(1000)
    with test_pipeline.TestPipeline() as p:
        plans = p | 'Refs For Plan' >> beam.Create(refs) | PlanShards(4, 128)
        chunks = (p | 'Refs' >> beam.Create(refs)
                  | beam.ParDo(AssignChunks(), plans=beam.pvalue.AsDict(plans))
                  | beam.GroupByKey()
                  | beam.Map(lambda kv: (kv[0], sorted(r.key for g in kv[1] for r in g))))
        keys = chunks | beam.FlatMap(lambda kv: kv[1])
        assert_that(keys, equal_to([r.key for r in refs]), label='each ref once')
        sizes = chunks | beam.Map(lambda kv: 64 <= len(kv[1]) <= 128)
        assert_that(sizes, equal_to([True] * 8), label='8 chunks of at most 128')


def test_list_examples_accounts_for_every_file(tmp_path):
    from transforms.listing import FolderSplit
    root = write_tree(tmp_path, {'train/a/1.jpg': b'x', 'train/a/.hidden': b'x',
                                 'train/loose.jpg': b'x', 'train/b/sub/2.jpg': b'x'})
    with test_pipeline.TestPipeline() as p:
        refs = p | ListExamples([FolderSplit('train', f'{root}/train')], measure_sizes=False)
        assert_that(refs | beam.Map(lambda r: (r.filename, r.label, r.ignored, r.problem is None)),
                    equal_to([('1.jpg', 'a', False, True), ('.hidden', None, True, True),
                              ('loose.jpg', None, False, False), ('2.jpg', 'b', False, True)]))


def test_resolve_labels_counts_inputs_and_ignored_and_fixes_ids():
    refs = _refs(5) + [ExampleRef('train', '/data/.x', '/data/.x', '.x', None, ignored=True),
                       ExampleRef('train', '/data/bad', '', 'bad', 'zz', problem='broken link')]
    with test_pipeline.TestPipeline() as p:
        facts, label_map = p | beam.Create(refs) | ResolveLabels(('train',), LabelSettings())
        assert_that(facts | beam.Map(lambda f: (f.split_counts, f.ignored)),
                    equal_to([({'train': 6}, {'train': 1})]), label='facts')
        assert_that(label_map | beam.Map(lambda m: m.names), equal_to([('c0', 'c1', 'c2', 'zz')]),
                    label='label names')


def test_write_shards_accounts_for_bad_refs(tmp_path):
    """A problem known at listing, a missing file and a non-image are errors; the rest records."""
    root = write_tree(tmp_path / 'in', {'ok.jpg': imagemaker.jpeg(20, 20), 'text.jpg': b'text'})
    refs = [ExampleRef('train', f'{root}/ok.jpg', f'{root}/ok.jpg', 'ok.jpg', 'a'),
            ExampleRef('train', f'{root}/text.jpg', f'{root}/text.jpg', 'text.jpg', 'a'),
            ExampleRef('train', f'{root}/gone.jpg', f'{root}/gone.jpg', 'gone.jpg', 'a'),
            ExampleRef('train', f'{root}/link', '', 'link', 'a', problem='broken link')]
    settings = ConversionSettings(str(tmp_path / 'out'), 'd', ('train',), num_shards=1)
    with test_pipeline.TestPipeline() as p:
        inputs = p | 'Refs' >> beam.Create(refs)
        plans = inputs | PlanShards(1, 128)
        _, label_map = inputs | ResolveLabels(('train',), LabelSettings())
        results = inputs | WriteShards(settings, plans, label_map)
        assert_that(results | beam.Map(lambda r: (r.records, sorted(
                        (s.rsplit('/', 1)[-1], reason.split(':')[0]) for s, reason in r.errors))),
                    equal_to([(1, [('gone.jpg', 'cannot read file'), ('link', 'broken link'),
                                   ('text.jpg', 'not an image Pillow can read (cannot identify image file)')])]))
    shard = next((tmp_path / 'out').glob('.tmp-*/shards/*.tfrecord'))
    with open(shard, 'rb') as stream:
        assert [records.decode_example(r)[records.FILENAME] for r in records.read_records(stream)] == [[b'ok.jpg']]
