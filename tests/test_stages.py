"""Each stage of the pipeline alone, on Beam's in-process runner (TestPipeline + assert_that):
what the end-to-end tests only imply, pinned where it is decided."""
import collections
import dataclasses
import json
import os

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipeline.output import layout, output_lock, records, temp_folder
from pipeline.testing import imagemaker
from tests.helpers import stage_pipeline, write_tree
from transforms import entries
from pipeline.base.refs import ExampleRef
from pipeline.base.settings import ConversionSettings
from pipeline.inputs.kinds import Partition
from pipeline.local_runner import LocalRunner
from transforms.check_quality import CheckQuality
from transforms.commit import CommitDataset
from transforms.encode_chunks import EncodeTasks, task_chunks
from transforms.gathered import Gathered
from transforms.listing import ListExamples, refs_of
from transforms.planning import PlanConversion
from transforms.spread import Spread
from transforms.sharding import (
    CHUNK_EXAMPLES, bucket_bits, dealt_tasks, plan_shards, shard_count, tasks)
from transforms.write_shards import WriteShards


def _refs(n: int, split: str = 'train') -> list[ExampleRef]:
    return [ExampleRef(split, f'/data/{split}/img{i}.jpg', f'/data/{split}/img{i}.jpg',
                       f'img{i}.jpg', f'c{i % 3}', 1000) for i in range(n)]


class _Given(Partition):
    """A partition that lists the refs it is given."""
    listed_together = True

    def __init__(self, refs: list[ExampleRef]):
        self.refs = refs

    def examples(self):
        return iter(self.refs)


def _listed(p, refs: list[ExampleRef], spill_to: str | None = None, label: str = 'List'):
    """What listing `refs` gives (in two partitions), its runs in `spill_to` if given."""
    return p | label >> ListExamples([_Given(refs[::2]), _Given(refs[1::2])], spill_to,
                                     measure_sizes=False)


def _planned(listed, splits: tuple[str, ...], num_shards: int, target_shard_mb: float = 128):
    """The Plan of what was listed, the shards sized by the input bytes (no sample)."""
    return listed | PlanConversion(ConversionSettings(
        'd', splits, num_shards=num_shards, target_shard_mb=target_shard_mb), False)


def _shard_sizes(refs: list[ExampleRef], plan) -> list[int]:
    """Examples per shard, ranking refs as the chunks rank them: by (hash, key)."""
    ranked = sorted(refs, key=lambda r: (r.key_hash, r.key))
    sizes = collections.Counter(plan.shard_of_rank(rank) for rank in range(len(ranked)))
    return [sizes[s] for s in range(plan.num_shards)]


@pytest.mark.slow
def test_plan_shards_honours_the_shard_count_with_even_shards():
    train, test = _refs(1000), _refs(7, 'test')
    with stage_pipeline() as p:
        plan = _planned(_listed(p, train + test), ('train', 'test'), num_shards=4)
        sizes = plan | beam.FlatMap(lambda plan: [
            (split, _shard_sizes(train if split == 'train' else test, shard_plan))
            for split, shard_plan in plan.shard_plans.items()])
        assert_that(sizes, equal_to([('train', [250] * 4), ('test', [2, 2, 2, 1])]))


@pytest.mark.slow
def test_plan_shards_targets_a_shard_size_and_never_more_shards_than_inputs():
    refs = _refs(1000)   # 1000 x 1000 bytes: about 1 MB.
    with stage_pipeline() as p:
        counts = (_planned(_listed(p, refs), ('train',), num_shards=0, target_shard_mb=0.25)
                  | beam.Map(lambda plan: plan.shard_plans['train'].num_shards))
        assert_that(counts, equal_to([4]))
    with stage_pipeline() as p:
        counts = (_planned(_listed(p, refs[:3]), ('train',), num_shards=100)
                  | beam.Map(lambda plan: plan.shard_plans['train'].num_shards))
        assert_that(counts, equal_to([3]))


@pytest.mark.slow
def test_tasks_read_every_ref_once_in_chunks_of_consecutive_ranks(tmp_path):
    refs = _refs(1000)
    ranks = {r.key: i for i, r in enumerate(sorted(refs, key=lambda r: (r.key_hash, r.key)))}
    with stage_pipeline() as p:
        plan = _planned(_listed(p, refs, str(tmp_path)), ('train',), num_shards=4)
        chunks = plan | beam.FlatMap(lambda plan: [
            (chunk, sorted(ranks[r.key] for r in found))
            for task in tasks('train', plan.shard_plans['train'])
            for chunk, found in task_chunks(task, plan.runs, plan.shard_plans['train'])])
        assert_that(chunks | beam.FlatMap(lambda kv: kv[1]), equal_to(list(range(1000))),
                    label='each ref once')
        # A chunk is a run of consecutive ranks of about CHUNK_EXAMPLES.
        spans = chunks | beam.Map(lambda kv: (kv[1][-1] - kv[1][0] + 1 == len(kv[1]),
                                              100 <= len(kv[1]) <= 160))
        assert_that(spans | beam.combiners.Count.PerElement(), equal_to([((True, True), 8)]),
                    label='8 runs of about 128')


def _synthetic_plan(count: int, num_shards: int, seed: int = 0):
    """The plan for `count` examples with random 64-bit hashes, planned from their histogram."""
    hashes = np.random.default_rng(seed).integers(0, 2**63, count, dtype=np.int64).astype(np.uint64) * 2
    bits = bucket_bits(count)
    buckets, counts = np.unique((hashes >> np.uint64(64 - bits)).astype(np.int64), return_counts=True)
    return plan_shards(buckets, counts, bits, count, shard_count(count, 0, num_shards, 128))


@pytest.mark.parametrize('count,shards', [(70_000, 70_000), (1_000_000, 1_000_000),
                                           (3_000_000, 1_000_000), (2_000_000, 81_956)])
def test_planner_honours_any_shard_count_up_to_a_million_with_even_chunks(count, shards):
    plan = _synthetic_plan(count, shards)
    assert plan.num_shards == shards and plan.count == count
    sizes = np.bincount(np.arange(count) * shards // count, minlength=shards)
    assert sizes.min() >= count // shards and sizes.max() <= -(-count // shards)
    chunk_sizes = np.diff(plan.chunk_ranks)
    assert chunk_sizes.sum() == count and chunk_sizes.min() > 0
    assert np.median(chunk_sizes) <= 1.2 * CHUNK_EXAMPLES and chunk_sizes.max() <= 2 * CHUNK_EXAMPLES
    assert shard_count(count, 0, 2_000_000, 128) == min(count, 1_000_000)


@pytest.mark.slow
def test_list_examples_accounts_for_every_file(tmp_path):
    from pipeline.inputs.folders import place_of
    from pipeline.inputs.folder_layout import FolderSplit
    root = write_tree(tmp_path, {'train/a/1.jpg': b'x', 'train/a/.hidden': b'x',
                                 'train/loose.jpg': b'x', 'train/b/sub/2.jpg': b'x'})
    with stage_pipeline() as p:
        listed = p | ListExamples([FolderSplit('train', place_of(f'{root}/train'))],
                                  str(tmp_path / 'runs'), measure_sizes=False)
        refs = (listed | beam.FlatMap(lambda found: refs_of(found.runs, 'train', 0, 1 << 64))
                | beam.Map(lambda r: (r.filename, r.label, r.problem is None)))
        assert_that(refs, equal_to([('1.jpg', 'a', True), ('loose.jpg', None, False),
                                    ('2.jpg', 'b', True)]), label='inputs')
        assert_that(listed | beam.Map(lambda found: found.facts.ignored),
                    equal_to([{'train': 1}]), label='ignored')


@pytest.mark.slow
def test_the_plan_counts_inputs_and_ignored_and_fixes_label_ids():
    refs = _refs(5) + [ExampleRef('train', '/data/.x', '/data/.x', '.x', None, ignored=True),
                       ExampleRef('train', '/data/bad', '', 'bad', 'zz', problem='broken link')]
    with stage_pipeline() as p:
        plan = _planned(_listed(p, refs), ('train',), num_shards=1)
        assert_that(plan | beam.Map(lambda plan: (plan.facts.split_counts, plan.facts.ignored,
                                                  plan.label_map.names)),
                    equal_to([({'train': 6}, {'train': 1}, ('c0', 'c1', 'c2', 'zz'))]))


def test_gathered_calls_once_with_every_element_and_with_none():
    """What a stage makes of a whole PCollection: one call, every element, also for none."""
    with stage_pipeline() as p:
        some = p | 'Some' >> beam.Create([3, 1, 2]) | 'Sum' >> Gathered(
            lambda xs, side: (sorted(xs), side), beam.pvalue.AsSingleton(p | beam.Create(['s'])))
        none = (p | 'None' >> beam.Create([0]) | beam.Filter(bool)
                | 'Count' >> Gathered(lambda xs: ('none', len(xs))))
        each = p | 'Each' >> beam.Create(['a', 'b']) | 'Spread' >> Gathered(sorted, each=True)
        assert_that(some, equal_to([([1, 2, 3], 's')]), label='some')
        assert_that(none, equal_to([('none', 0)]), label='none')
        assert_that(each, equal_to(['a', 'b']), label='each')


@pytest.mark.slow
def test_spread_hands_a_fan_out_to_every_worker_process_and_keeps_every_element_once():
    """What one worker fanned out is processed on both after Spread; duplicates stay, none
    gives none."""
    options = PipelineOptions(['--direct_running_mode=multi_processing', '--direct_num_workers=2'])
    with TestPipeline(runner=LocalRunner(), options=options) as p:
        fanned = (p | beam.Create([40], reshuffle=False)
                  | 'Fan Out' >> beam.FlatMap(lambda n: [(i % 30, os.getpid()) for i in range(n)]))
        spread = (fanned | 'Spread' >> Spread()
                  | 'Where' >> beam.Map(lambda element: (element[0], os.getpid())))
        none = fanned | beam.Filter(lambda _: False) | 'Spread None' >> Spread()
        assert_that(fanned | 'Fanned In' >> beam.Map(lambda e: e[1]) | 'Fan Pids' >> beam.Distinct()
                    | beam.combiners.Count.Globally(), equal_to([1]), label='fan-out on one')
        assert_that(spread | beam.Map(lambda e: e[0]), equal_to([i % 30 for i in range(40)]),
                    label='every element once')
        assert_that(spread | 'Spread In' >> beam.Map(lambda e: e[1]) | 'Spread Pids' >> beam.Distinct()
                    | 'Count Spread' >> beam.combiners.Count.Globally(), equal_to([2]),
                    label='spread on both')
        assert_that(none, equal_to([]), label='none')
        # What sharding.dealt_tasks counts on: the elements are handed to the workers in turn,
        # in the order they were made (here by a fan-out spread as it is made).
        made = (p | 'One' >> beam.Create([12], reshuffle=False)
                | 'Spread In Order' >> Spread(range)
                | 'Worker Of' >> beam.Map(lambda i: (i, os.getpid())))
        assert_that(made, _in_turn, label='dealt in turn')


def _in_turn(made: list[tuple[int, int]]) -> None:
    turns = collections.defaultdict(set)
    for index, pid in made:
        turns[pid].add(index % 2)
    assert sorted(map(sorted, turns.values())) == [[0], [1]], dict(turns)


def _plan(counts: list[int], bytes_each: int):
    counts = np.array(counts)
    return plan_shards(np.arange(len(counts)), counts, 16, int(counts.sum()), 1,
                       int(counts.sum()) * bytes_each)


@pytest.mark.parametrize('workers', [2, 3])
def test_tasks_are_dealt_largest_first_in_turns_that_even_out_the_workers(workers):
    """The turns of each worker (elements k, k + workers, ... of the order made) hold its
    largest tasks first and work within the smallest task of any other's; every task once."""
    plans = [('validation', _plan([128] * 7 + [100], 900)), ('test', _plan([128] * 7 + [60], 1000)),
             ('train', _plan([128] * 61 + [64], 1100))]   # 31 train tasks of 2 chunks.
    made = [task for split, plan in plans for task in tasks(split, plan)]
    cost = {task: (plan.first_rank(task.end) - plan.first_rank(task.first)) * plan.input_bytes
            // plan.count for split, plan in plans for task in tasks(split, plan)}
    dealt = dealt_tasks(plans, workers)
    assert sorted(dealt, key=str) == sorted(made, key=str)
    turns = [[cost[task] for task in dealt[k::workers]] for k in range(workers)]
    assert all(turn == sorted(turn, reverse=True) for turn in turns)
    assert max(map(sum, turns)) - min(map(sum, turns)) <= min(cost.values())
    assert [cost[task] for task in dealt_tasks(plans, 0)] == sorted(cost.values(), reverse=True)


def _written(p, refs: list[ExampleRef], settings: ConversionSettings) -> tuple:
    """(shard results, plan, EncodeTasks' and CheckQuality's outputs) of `refs`, as the
    conversion's stages give them."""
    listed = _listed(p, refs, layout.listed_folder(settings.temp_dir))
    plan = listed | PlanConversion(settings, False)
    encoded = plan | EncodeTasks(settings)
    checked = plan | CheckQuality(settings, encoded['filed'])
    return encoded['parts'] | WriteShards(settings, plan), plan, encoded, checked


@pytest.mark.slow
def test_write_shards_accounts_for_bad_refs(tmp_path):
    """A problem known at listing, a missing file and a non-image are errors; the rest records."""
    root = write_tree(tmp_path / 'in', {'ok.jpg': imagemaker.jpeg(20, 20), 'text.jpg': b'text'})
    refs = [ExampleRef('train', f'{root}/ok.jpg', f'{root}/ok.jpg', 'ok.jpg', 'a'),
            ExampleRef('train', f'{root}/text.jpg', f'{root}/text.jpg', 'text.jpg', 'a'),
            ExampleRef('train', f'{root}/gone.jpg', f'{root}/gone.jpg', 'gone.jpg', 'a'),
            ExampleRef('train', f'{root}/link', '', 'link', 'a', problem='broken link')]
    settings = ConversionSettings('d', ('train',), num_shards=1, output_dir=str(tmp_path / 'out'))
    with stage_pipeline() as p:
        results = _written(p, refs, settings)[0]
        assert_that(results | beam.Map(lambda r: (r.records, r.errors)), equal_to([(1, 3)]))
    shard = next((tmp_path / 'out').glob('.tmp-*/shards/*.tfrecord'))
    assert sorted((s.rsplit('/', 1)[-1], reason.split(':')[0]) for s, reason in entries.merged(
        [entries.entry_path(str(shard), 'errors')], '')) == [
            ('gone.jpg', 'cannot read file'), ('link', 'broken link'),
            ('text.jpg', 'not an image Pillow can read (cannot identify image file)')]
    with open(shard, 'rb') as stream:
        assert [records.decode_example(r)[records.FILENAME] for r in records.read_records(stream)] == [[b'ok.jpg']]


@pytest.mark.slow
def test_commit_dataset_puts_shards_and_metadata_in_place_and_returns_the_summary(tmp_path):
    """The stage after WriteShards, as the launcher runs it: lock held, temporary folder marked."""
    images = {f'train/c{i % 2}/{i}.jpg': imagemaker.jpeg(20, 20, seed=i) for i in range(6)}
    root = write_tree(tmp_path / 'in', {**images, 'train/c0/bad.jpg': b'text'})
    refs = [ExampleRef('train', f'{root}/{path}', f'{root}/{path}', path.rsplit('/', 1)[1],
                       path.split('/')[1]) for path in [*images, 'train/c0/bad.jpg']]
    out = str(tmp_path / 'out')
    settings = ConversionSettings('d', ('train',), num_shards=2, output_dir=out,
                                  max_error_ratio=0.2)
    token = output_lock.acquire(out, settings.run_id, 'DirectRunner', waits=True)
    settings = dataclasses.replace(settings, lock_token=token)
    temp_folder.start(out, settings.run_id)
    with stage_pipeline() as p:
        shards, plan, encoded, checked = _written(p, refs, settings)
        summary = shards | CommitDataset(settings, plan, encoded['filed'], checked)
        assert_that(summary | beam.Map(lambda s: (s['run_id'], s['splits']['train']['records'],
                                                  s['splits']['train']['skipped'],
                                                  s['splits']['train']['classes'])),
                    equal_to([(settings.run_id, 6, 1, {'c0': 3, 'c1': 3})]))
    output_lock.release(out, token)
    assert sorted(os.listdir(out)) == [
        'd-train.tfrecord-00000-of-00002', 'd-train.tfrecord-00001-of-00002', 'damaged-train.jsonl',
        'dataset_info.json', 'errors-train.jsonl', 'features.json', 'image.class.label.labels.txt',
        'labels.txt', 'leakage.jsonl', 'summary.json']
    assert json.loads(open(f'{out}/errors-train.jsonl').read())['source'] == f'{root}/train/c0/bad.jpg'
    info = json.load(open(f'{out}/dataset_info.json'))
    counts = []
    for index in range(2):
        with open(f'{out}/d-train.tfrecord-0000{index}-of-00002', 'rb') as stream:
            counts.append(str(sum(1 for _ in records.read_records(stream))))
    assert [s['shardLengths'] for s in info['splits']] == [counts] and sum(map(int, counts)) == 6


def test_every_stage_passes_beams_type_checks_of_its_hints(tmp_path):
    # Runs leave Beam's construction-time type checks off (a third of a small run's start-up);
    # the whole graph, every optional stage in, is built here with them on.
    from pipeline import job
    write_tree(tmp_path / 'in', {f'{s}/c{i % 2}/{i}.jpg': imagemaker.jpeg(32, 24, seed=i)
                                 for s in ('train', 'test') for i in range(4)})
    flags = [f'--input_dir={tmp_path}/in', f'--output_dir={tmp_path}/out', '--leakage=drop',
             '--output_format=tfrecord,array_record', '--dali_index', '--damaged_images=keep']
    for plan_only in (False, True):
        built = job.prepare([*flags, f'--plan_only={plan_only}'], pipeline_type_check=True)
        assert built.launch.beam.view_as(beam.options.pipeline_options.TypeOptions).pipeline_type_check
        labels = {t.full_label for t in built.pipeline.transforms_stack[0].parts}
        assert ('Write Shards' in labels) is not plan_only
        if not plan_only:
            output_lock.release(f'{tmp_path}/out', built.settings.lock_token)
