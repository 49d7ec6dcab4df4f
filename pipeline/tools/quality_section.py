"""The report's data-quality sections: damaged JPEGs per split, and the clusters of
near-duplicates that span splits, each with its closest pair side by side (thumbnails inlined
in the page)."""
import base64
import html
import io
import json

from PIL import Image

from pipeline.io import fileio
from pipeline.output import metadata

THUMBNAIL = 128
CLUSTERS_SHOWN = 24
DAMAGED_SHOWN = 200


def _lines(output_dir: str, name: str) -> list[dict]:
    data = fileio.read_if_exists(fileio.join(output_dir, name))
    return [json.loads(line) for line in data.decode().splitlines() if line] if data else []


def _thumbnail(source: str) -> str:
    """An <img> of the image at `source` (the input), or a note when it cannot be read here."""
    try:
        image = Image.open(io.BytesIO(fileio.read_bytes(source)))
        image.thumbnail((THUMBNAIL, THUMBNAIL))
        out = io.BytesIO()
        image.convert('RGB').save(out, 'JPEG', quality=85)
    except Exception:
        return '<i>not readable here</i>'
    return f'<img src="data:image/jpeg;base64,{base64.b64encode(out.getvalue()).decode()}">'


def damaged_section(output_dir: str, splits: list[str]) -> str:
    rows = [e for split in splits for e in _lines(output_dir, metadata.damaged_report_name(split))]
    if not rows:
        return '<p>No damaged JPEGs (strict libjpeg-turbo).</p>'
    return ('<table><tr><th>split</th><th>file</th><th>libjpeg says</th><th>done</th></tr>'
            + ''.join(f'<tr><td>{html.escape(e["split"])}</td><td>{html.escape(e["source"])}</td>'
                      f'<td>{html.escape(e["reason"])}</td><td>{html.escape(e["action"])}</td></tr>'
                      for e in rows[:DAMAGED_SHOWN])
            + '</table>' + (f'<p>... and {len(rows) - DAMAGED_SHOWN} more (damaged-SPLIT.jsonl)'
                            '</p>' if len(rows) > DAMAGED_SHOWN else ''))


def leakage_section(output_dir: str, leakage: dict | None) -> str:
    if leakage is None:
        return '<p>Not checked (a dataset written before leakage was checked).</p>'
    if leakage['action'] == 'off':
        return '<p>Not checked (--leakage=off: the records carry no perceptual hashes).</p>'
    if 'clusters' not in leakage:
        return ('<p>A dataset written before clusters: its leakage.jsonl lists '
                f'{leakage["pairs"]} near-duplicate pair(s) across splits.</p>')
    found = sorted(_lines(output_dir, metadata.LEAKAGE),
                   key=lambda c: (c['closest']['distance'], -c['images']))
    head = (f'<p>{leakage["clusters"]} cluster(s) of near-duplicates span splits within '
            f'{leakage["radius"]} of 64 bits ({leakage["images"]} images, the largest '
            f'{leakage["largest"]}; closest pair exact in {leakage["exact"]}, mirrored in '
            f'{leakage["mirrored"]}); --leakage={html.escape(leakage["action"])}. '
            f'{sum(leakage["flat_images"].values())} flat image(s) and '
            f'{len(leakage["crowded_buckets"])} crowded hash bucket(s) were not compared.</p>')
    if not found:
        return head
    rows = ''.join(_cluster_row(c) for c in found[:CLUSTERS_SHOWN])
    more = (f'<p>... and {len(found) - CLUSTERS_SHOWN} more (leakage.jsonl)</p>'
            if len(found) > CLUSTERS_SHOWN else '')
    return (f'{head}<table><tr><th>earlier split</th><th>later split</th><th>distance (bits)</th>'
            f'<th>cluster</th></tr>{rows}</table>{more}')


def _cluster_row(cluster: dict) -> str:
    """A cluster's closest pair side by side, with its distance and its members per split."""
    p = cluster['closest']
    sizes = ', '.join(f'{html.escape(split)} {len(sources)}'
                      for split, sources in cluster['members'].items())
    return (f'<tr><td>{_thumbnail(p["source_a"])}<br>{html.escape(p["split_a"])}: '
            f'{html.escape(p["source_a"])}</td><td>{_thumbnail(p["source_b"])}<br>'
            f'{html.escape(p["split_b"])}: {html.escape(p["source_b"])}</td><td>{p["distance"]}'
            f'{" (exact)" if p["exact"] else ""}{" (mirrored)" if p["mirrored"] else ""}</td>'
            f'<td>{cluster["images"]} images: {sizes}</td></tr>')
