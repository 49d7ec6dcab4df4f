"""inspect: a static HTML report whose images exist and are real PNGs of the expected size."""
import re

import pytest
from PIL import Image

from pipeline.tools.report import collect, main, sheet_samples, write_report
from pipeline.testing import imagemaker
from tests.helpers import convert, write_tree

pytestmark = pytest.mark.slow


def test_report_references_real_images_and_lists_skipped_files(tmp_path):
    files = {f'train/class{c}/{i}.jpg': imagemaker.jpeg(60 + 10 * i, 40, seed=c * 10 + i)
             for c in range(3) for i in range(4)}
    files['train/class0/broken.jpg'] = b'broken'
    root = write_tree(tmp_path / 'in', files)
    out = str(tmp_path / 'out')
    convert(f'--input_dir={root}', f'--output_dir={out}', '--num_shards=2', '--max_error_ratio=0.2')
    report = tmp_path / 'rep' / 'report.html'
    paths = write_report(out, str(report))
    page = report.read_text()
    images = re.findall(r'<img src="([^"]+)"', page)
    assert images == ['report.png', 'report-samples.png']
    charts = Image.open(tmp_path / 'rep' / images[0])
    sheet = Image.open(tmp_path / 'rep' / images[1])
    assert charts.format == 'PNG' and charts.size == (960, 1040)
    assert sheet.format == 'PNG' and sheet.size == (960, 3 * 160)  # 3 classes x 6 samples
    assert '<td>train</td><td>12</td><td>2</td>' in page
    assert 'broken.jpg' in page and 'not an image Pillow can read' in page
    assert paths == [str(report), str(tmp_path / 'rep' / 'report.png'), str(tmp_path / 'rep' / 'report-samples.png')]
    assert main([out, f'--report={tmp_path}/cli.html']) == 0   # The command line.
    assert (tmp_path / 'cli-samples.png').exists()


def test_shard_chart_marks_whole_shards_only(tmp_path):
    from pipeline.tools.report import charts
    root = write_tree(tmp_path / 'in', {f'train/c{i % 2}/{i}.jpg':
                                        imagemaker.jpeg(30, 20, seed=i) for i in range(6)})
    for shards in (1, 3):
        out = str(tmp_path / f'out{shards}')
        convert(f'--input_dir={root}', f'--output_dir={out}', f'--num_shards={shards}')
        figure = charts(collect(out, 100))
        figure.canvas.draw()
        shard_axis = figure.axes[1]
        assert list(shard_axis.get_xticks()) == list(range(shards))
        assert [t.get_text() for t in shard_axis.get_xticklabels()] == [str(i) for i in range(shards)]


def test_report_shows_leaked_clusters_side_by_side_and_damaged_files(tmp_path):
    import base64
    import io
    photo = Image.fromarray(imagemaker.photo(200, 150, seed=1))
    files = {f'train/c{i % 2}/{i}.jpg': imagemaker.encode(
        Image.fromarray(imagemaker.photo(200, 150, seed=10 + i)), 'JPEG') for i in range(4)}
    files['train/c0/original.jpg'] = imagemaker.encode(photo, 'JPEG')
    files['test/c0/mirrored.jpg'] = imagemaker.encode(photo.transpose(Image.Transpose.FLIP_LEFT_RIGHT), 'JPEG')
    damaged = imagemaker.encode(Image.fromarray(imagemaker.photo(200, 150, seed=2)), 'JPEG')
    files['test/c1/damaged.jpg'] = damaged[:len(damaged) // 2]
    root = write_tree(tmp_path / 'in', files)
    out = str(tmp_path / 'out')
    convert(f'--input_dir={root}', f'--output_dir={out}', '--num_shards=1',
            '--damaged_images=keep')
    report = tmp_path / 'report.html'
    write_report(out, str(report))
    page = report.read_text()
    row = re.search(r'<tr><td><img src="data:image/jpeg;base64,([^"]+)"><br>train: ([^<]+)</td>'
                    r'<td><img src="data:image/jpeg;base64,([^"]+)"><br>test: ([^<]+)</td>'
                    r'<td>(\d+) \(mirrored\)</td><td>2 images: train 1, test 1</td></tr>', page)
    assert row and row[2].endswith('original.jpg') and row[4].endswith('mirrored.jpg')
    left, right = (Image.open(io.BytesIO(base64.b64decode(row[i]))) for i in (1, 3))
    assert left.size == right.size == (128, 96)
    assert ('1 cluster(s) of near-duplicates span splits within 8 of 64 bits (2 images, the '
            'largest 2; closest pair exact in 0, mirrored in 1)') in page
    assert re.search(r'<td>test</td><td>[^<]*damaged.jpg</td><td>damaged JPEG: Premature end of '
                     r'JPEG file</td><td>keep</td>', page)


def test_the_contact_sheet_takes_samples_from_every_split(tmp_path):
    files = {f'{split}/c{c}/{i}.jpg': imagemaker.jpeg(30, 30, seed=100 * n + 10 * c + i)
             for n, split in enumerate(('train', 'validation', 'test'))
             for c in range(2) for i in range(8)}
    out = str(tmp_path / 'out')
    convert(f'--input_dir={write_tree(tmp_path / "in", files)}', f'--output_dir={out}')
    shown = sheet_samples(collect(out, 100))
    assert sorted(shown) == [(0, 'c0'), (1, 'c1')]
    for samples in shown.values():
        assert [r['split'] for r in samples] == ['train', 'validation', 'test'] * 2
