"""Labels never shift without a word: a class removed or added before `--overwrite` is named
with the ids it moves, and a class the labels file names with no image is an empty class of
every split (in the printed table, summary.json's empty_classes and labels.txt)."""
import json

from pipeline.testing import imagemaker
from pipeline.testing.datasets import run_verify, write_tree
from tests.helpers import cli


def _classes(root, names):
    return write_tree(root, {f'train/{name}/{n}.jpg': imagemaker.jpeg(16, 16, seed=i * 7 + n)
                             for i, name in enumerate(names) for n in range(2)})


def test_a_removed_class_is_named_with_every_id_it_moves(tmp_path):
    out = tmp_path / 'out'
    first = cli(f'--input_dir={_classes(tmp_path / "a", ["bird", "cat", "dog"])}',
                f'--output_dir={out}')
    assert first.returncode == 0, first.stderr
    assert 'labels changed' not in first.stdout
    again = cli(f'--input_dir={_classes(tmp_path / "b", ["cat", "dog", "eel"])}',
                f'--output_dir={out}', '--overwrite')
    assert again.returncode == 0, again.stderr
    line = ('labels changed against the dataset replaced: bird (0) gone; cat 1 -> 0; '
            'dog 2 -> 1; eel (2) new; to keep a dataset\'s ids, give its class names in id '
            'order with --labels_file')
    assert line in again.stdout.splitlines()   # In the summary, and when the run starts:
    logged = again.stderr.splitlines()
    assert logged.index(line) < min(n for n, text in enumerate(logged)
                                    if text.startswith('converting:')), logged
    assert (out / 'labels.txt').read_text() == 'cat\ndog\neel\n'


def test_a_labels_file_class_without_an_image_is_an_empty_class(tmp_path):
    (tmp_path / 'labels.txt').write_text('cat\nfish\ndog\n')
    out = tmp_path / 'out'
    done = cli(f'--input_dir={_classes(tmp_path / "in", ["cat", "dog"])}', f'--output_dir={out}',
               f'--labels_file={tmp_path}/labels.txt')
    assert done.returncode == 0, done.stderr
    train = json.loads((out / 'summary.json').read_text())['splits']['train']
    assert (train['classes'], train['empty_classes']) == ({'cat': 2, 'dog': 2, 'fish': 0},
                                                          ['fish'])
    assert 'train: no records for class(es) fish (no input of theirs was listed' in done.stdout
    assert [line.split() for line in done.stdout.splitlines() if line.startswith('fish ')] == [
        ['fish', '0']]
    assert (out / 'labels.txt').read_text() == 'cat\nfish\ndog\n'
    checked = run_verify(str(out))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_plan_a_user_reads_holds_no_class_names(tmp_path):
    """Only the conversion's own note of its plan carries the class names (for the line above):
    `--plan_only --plan_format=json` prints the plan as it was."""
    planned = cli(f'--input_dir={_classes(tmp_path / "in", ["cat", "dog"])}', '--plan_only',
                  '--plan_format=json')
    assert planned.returncode == 0, planned.stderr
    document = json.loads(planned.stdout)
    assert 'label_names' not in document and document['labels'] == 2
