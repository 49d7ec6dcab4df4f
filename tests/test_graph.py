"""The job's graph (pipeline/graph.py): six stages a reader sees at once, and few steps under
them, held at their size. Built, never run."""
import collections

from apache_beam.portability import common_urns

from pipeline import beam_internals, job
from pipeline.output import output_lock
from pipeline.testing import imagemaker
from tests.helpers import write_tree

STAGES = ['List Examples', 'Plan Conversion', 'Encode Chunks', 'Check Quality', 'Write Shards',
          'Commit Dataset']
# The default job: its transforms (the steps of a Dataflow job), its groupings (each a shuffle)
# and the stages the local runner fuses it into (each a hand-off between the workers).
TRANSFORMS, GROUPINGS, FUSED = 39, 5, 9


def test_the_default_job_is_six_stages_of_few_steps(tmp_path):
    write_tree(tmp_path / 'in', {f'{s}/c{i % 2}/{i}.jpg': imagemaker.jpeg(32, 24, seed=i)
                                 for s in ('train', 'test') for i in range(2)})
    built = job.prepare([f'--input_dir={tmp_path}/in', f'--output_dir={tmp_path}/out'])
    try:
        proto = built.pipeline.to_runner_api()
        fused = beam_internals.fused_stages(built.pipeline)
    finally:
        output_lock.release(f'{tmp_path}/out', built.settings.lock_token)
    assert [t.full_label for t in built.pipeline.transforms_stack[0].parts] == STAGES
    transforms = proto.components.transforms
    kinds = collections.Counter(t.spec.urn for t in transforms.values() if not t.subtransforms)
    assert (len(transforms), kinds[common_urns.primitives.GROUP_BY_KEY.urn], len(fused)) == (
        TRANSFORMS, GROUPINGS, FUSED), fused
