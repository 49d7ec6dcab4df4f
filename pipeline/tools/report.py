"""A report on a written dataset: `python -m pipeline.tools.report OUTPUT_DIR --report report.html`.

Writes a static HTML page (opens in a browser, no server) and beside it two PNGs: charts
(class histogram per split, shard sizes, image sizes) and a contact sheet of sample images per
class with their labels. Counts, shard sizes and skipped files are exact (from the metadata,
the file sizes and the error reports); image sizes and samples come from the first
`--sample_records` records of each split.
"""
import argparse
import collections
import html
import io
import itertools
import json
import math
import os
import sys

from PIL import Image

from pipeline.io import fileio
from pipeline.output import metadata, records, shard_formats
from pipeline.output.shard_formats import ShardFormat
from pipeline.errors import DatasetError
from pipeline.tools import quality_section

try:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
except ImportError:  # The report extra is not installed: main() says which to install.
    matplotlib = None

_CLASSES_SHOWN = 12
_PER_CLASS = 6


def _sample(paths: list[str], shard_format: ShardFormat, limit: int) -> list[dict]:
    out = []
    for path in paths:
        for data in shard_format.read_records(path):
            example = records.decode_example(data)
            out.append({'label': example[records.LABEL][0], 'text': example[records.TEXT][0].decode(),
                        'height': example[records.HEIGHT][0], 'width': example[records.WIDTH][0],
                        'encoded': example[records.ENCODED][0]})
            if len(out) >= limit:
                return out
    return out


def _errors(output_dir: str, split: str) -> list[dict]:
    path = fileio.join(output_dir, metadata.error_report_name(split))
    if not fileio.exists(path):
        return []
    return [json.loads(line) for line in fileio.read_bytes(path).decode().splitlines() if line]


def collect(output_dir: str, sample_records: int) -> dict:
    """Everything the report shows, per split."""
    try:
        info = metadata.load_json(output_dir, metadata.DATASET_INFO)
        summary = metadata.load_json(output_dir, metadata.SUMMARY)
    except Exception as exc:
        raise DatasetError(f'{output_dir} has no readable dataset_info.json and summary.json: '
                           f'{str(exc).splitlines()[0]}') from None
    splits = {}
    sizes = {found.path: found.size for found in fileio.list_dir(output_dir)}
    for entry in info['splits']:
        name = entry['name']
        shard_format = shard_formats.declared(info)[0]
        paths = metadata.shard_paths(output_dir, info, name)
        splits[name] = {'summary': summary['splits'][name], 'shard_bytes': [sizes.get(p, 0) for p in paths],
                        'sample': _sample(paths, shard_format, sample_records),
                        'errors': _errors(output_dir, name)}
    return {'name': info['name'], 'output_dir': output_dir, 'splits': splits,
            'leakage': summary.get('leakage')}


_MARKERS = {'train': 'o', 'validation': 's', 'test': '^'}


def charts(data: dict) -> 'plt.Figure':
    """Records per class, shard sizes and image sizes of `collect`'s data, one chart each."""
    splits = data['splits']
    fig, axes = plt.subplots(3, 1, figsize=(12, 13), constrained_layout=True)
    classes = sorted({c for s in splits.values() for c in s['summary']['classes']})
    width = 0.8 / max(1, len(splits))
    for i, (name, split) in enumerate(splits.items()):
        counts = [split['summary']['classes'].get(c, 0) for c in classes]
        axes[0].bar([x + i * width for x in range(len(classes))], counts, width, label=name)
        axes[1].plot([b / 1e6 for b in split['shard_bytes']], _MARKERS.get(name, 'o'), label=name)
        # Hollow markers of a shape per split: no split hides another where they overlap.
        axes[2].scatter([r['width'] for r in split['sample']], [r['height'] for r in split['sample']],
                        s=24, marker=_MARKERS.get(name, 'o'), facecolors='none',
                        edgecolors=f'C{i}', linewidths=0.8, label=name)
    axes[0].set_title('Records per class')
    if len(classes) <= 40:
        axes[0].set_xticks([x + width * (len(splits) - 1) / 2 for x in range(len(classes))],
                           classes, rotation=60, ha='right', fontsize=8)
    axes[0].set_ylabel('records')
    axes[0].yaxis.set_major_locator(MaxNLocator(integer=True))
    most_shards = max((len(s['shard_bytes']) for s in splits.values()), default=1)
    axes[1].set_title('Shard sizes')
    axes[1].set_xlabel('shard index')
    axes[1].set_ylabel('MB')
    axes[1].set_ylim(bottom=0)
    axes[1].set_xlim(-0.5, most_shards - 0.5)
    axes[1].set_xticks(range(0, most_shards, math.ceil(most_shards / 20)))   # Whole shards only.
    axes[2].set_title('Image sizes (sampled records)')
    axes[2].set_xlabel('width (px)')
    axes[2].set_ylabel('height (px)')
    for ax in axes:
        ax.legend()
    return fig


def sheet_samples(data: dict) -> dict:
    """(label, class name) -> up to _PER_CLASS sampled records, taken from the splits in turn."""
    by_split = collections.defaultdict(lambda: collections.defaultdict(list))
    for name, split in data['splits'].items():
        for record in split['sample']:
            by_split[(record['label'], record['text'])][name].append(dict(record, split=name))
    return {key: [r for turn in itertools.zip_longest(*splits.values()) for r in turn if r][:_PER_CLASS]
            for key, splits in by_split.items()}


def _contact_sheet(data: dict, path: str) -> None:
    by_class = sheet_samples(data)
    shown = sorted(by_class)[:_CLASSES_SHOWN] or [(0, 'no records')]
    fig, axes = plt.subplots(len(shown), _PER_CLASS, figsize=(2 * _PER_CLASS, 2 * len(shown)),
                             squeeze=False, constrained_layout=True)
    for row, key in enumerate(shown):
        for col in range(_PER_CLASS):
            ax = axes[row][col]
            ax.axis('off')
            if col < len(by_class.get(key, [])):
                try:
                    ax.imshow(Image.open(io.BytesIO(by_class[key][col]['encoded'])).convert('RGB'))
                except OSError:   # A damaged JPEG kept with --damaged_images=keep.
                    ax.text(0.5, 0.5, 'damaged JPEG', ha='center', va='center')
                ax.set_title(f'{by_class[key][col]["split"]} · {key[0]}: {key[1]}'[:32], fontsize=9)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _html(data: dict, charts: str, sheet: str) -> str:
    rows, errors, notes = [], [], []
    for name, split in data['splits'].items():
        s, shards = split['summary'], split['shard_bytes']
        if s.get('empty_classes'):
            notes.append(f'<p><b>{html.escape(name)}</b>: no records for class(es) '
                         f'{html.escape(", ".join(s["empty_classes"]))} (every input of theirs '
                         'was skipped; see below).</p>')
        rows.append(f'<tr><td>{html.escape(name)}</td><td>{s["records"]}</td><td>{len(shards)}</td>'
                    f'<td>{sum(shards) / 1e6:.1f}</td><td>{min(shards, default=0) / 1e6:.1f} – '
                    f'{max(shards, default=0) / 1e6:.1f}</td><td>{s["skipped"]}</td>'
                    f'<td>{s.get("damaged", 0)}</td></tr>')
        reasons = collections.Counter(e['reason'] for e in split['errors'])
        errors += [f'<tr><td>{html.escape(name)}</td><td>{html.escape(e["source"])}</td>'
                   f'<td>{html.escape(e["reason"])}</td></tr>' for e in split['errors'][:200]]
        errors += [f'<tr><td>{html.escape(name)}</td><td><i>{n} file(s)</i></td><td>{html.escape(r)}</td></tr>'
                   for r, n in reasons.most_common() if len(split['errors']) > 200]
    skipped = ('<table><tr><th>split</th><th>file</th><th>reason</th></tr>' + ''.join(errors) + '</table>'
               if errors else '<p>No files were skipped.</p>')
    return f'''<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Report: {html.escape(data["name"])} in {html.escape(data["output_dir"])}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left}} img{{max-width:100%}}</style></head>
<body><h1>{html.escape(data["name"])}</h1><p>{html.escape(data["output_dir"])}</p>
<h2>Splits</h2><table><tr><th>split</th><th>records</th><th>shards</th><th>MB</th>
<th>shard MB (min – max)</th><th>skipped</th><th>damaged</th></tr>{''.join(rows)}</table>{''.join(notes)}
<h2>Classes, shards and image sizes</h2><img src="{html.escape(charts)}" alt="charts">
<h2>Samples per class</h2><img src="{html.escape(sheet)}" alt="contact sheet">
<h2>Skipped files</h2>{skipped}
<h2>Damaged JPEGs</h2>{quality_section.damaged_section(data["output_dir"], list(data["splits"]))}
<h2>Near-duplicates across splits</h2>{quality_section.leakage_section(data["output_dir"], data["leakage"])}
</body></html>
'''


def write_report(output_dir: str, report: str, sample_records: int = 2000) -> list[str]:
    """Writes the HTML report and its two PNGs; returns their paths."""
    data = collect(output_dir.rstrip('/'), sample_records)
    stem = os.path.splitext(report)[0]
    charts_path, sheet = f'{stem}.png', f'{stem}-samples.png'
    os.makedirs(os.path.dirname(os.path.abspath(report)), exist_ok=True)
    figure = charts(data)
    figure.savefig(charts_path, dpi=80)
    plt.close(figure)
    _contact_sheet(data, sheet)
    with open(report, 'w') as stream:
        stream.write(_html(data, os.path.basename(charts_path), os.path.basename(sheet)))
    return [report, charts_path, sheet]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog='python -m pipeline.tools.report', description=__doc__.split('\n\n')[0])
    parser.add_argument('output_dir', help='The dataset folder (local or gs://).')
    parser.add_argument('--report', default='report.html', help='HTML file to write (default report.html).')
    parser.add_argument('--sample_records', type=int, default=2000,
                        help='Records read per split for image sizes and samples (default 2000).')
    args = parser.parse_args(argv)
    if matplotlib is None:
        print("error: the report needs matplotlib: pip install -e '.[report]' (or pip install "
              'matplotlib)', file=sys.stderr)
        return 2
    try:
        paths = write_report(args.output_dir, args.report, args.sample_records)
    except DatasetError as exc:
        print(f'error: {exc}', file=sys.stderr)
        return 2
    print('Wrote ' + ', '.join(paths))
    return 0


if __name__ == '__main__':
    sys.exit(main())
