"""The names and paths of the output folder: where each run's temporary folder is, and where its
work goes in it. Names only: nothing here reads or writes a file.

    .tmp-RUN/                 the temporary folder of run RUN (16 hex digits)
    .tmp-RUN/.image-tfrecords-run.json   its marker: run id and state, running or committed
    .tmp-RUN/resume-key.tag   a tag of the key its work is sealed under (transforms/resume.py)
    .tmp-RUN/parts/, shards/  its work: a TFRecord part per chunk and shard, a file per shard and
                              format (part_path, shard_path; resume.py says when it is reused)
    .tmp-RUN/groups/          the images of each parquet row group, as one blob (group_path)
    .tmp-RUN/listed/, filed/  sorted runs of the listed inputs and of the records' hashes
    .tmp-RUN/replaced/        the old dataset's files, moved aside by a commit
"""
import re

from pipeline.base.settings import TEMP_PREFIX
from pipeline.errors import printable
from pipeline.io import fileio
from pipeline.output import dali_index
from pipeline.output.shard_formats import ShardFormat

MARKER = '.image-tfrecords-run.json'
KEY_TAG = 'resume-key.tag'   # A tag of the key the run's work is sealed under (resume.py).
RUNNING, COMMITTED = 'running', 'committed'
REPLACED = 'replaced'   # The temporary folder's subfolder for the old dataset's files.
# Its subfolders of work: a TFRecord part per chunk and shard (with a sidecar and entry files
# each), a file per shard and format (and a sidecar), the leakage check's pairs and its linked
# groups, the rounds of merging many entry files into a report, the images of groups of
# inputs read together (transforms/grouped_reads.py), and the sorted runs that pass the listed
# inputs and the converted records' hashes between stages (pipeline/io/sorted_runs.py), and
# the listers' counts so far (transforms/listing.py, shown by pipeline/progress.py).
PARTS, SHARDS, PAIRS, LINKS, MERGE, GROUPS = 'parts', 'shards', 'pairs', 'links', 'merge', 'groups'
LISTED, FILED, FINAL = 'listed', 'filed', 'final'   # FINAL: the commit's staged metadata.
LISTING = 'listing'
WORK_FOLDERS = (PARTS, SHARDS, PAIRS, LINKS, MERGE, GROUPS, LISTED, FILED, FINAL, LISTING)
RUN_ID = re.compile(r'[0-9a-f]{16}\Z')


def check_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not RUN_ID.match(run_id):
        raise ValueError(f'not a run id: {printable(repr(run_id))}')
    return run_id


def temp_dir(output_dir: str, run_id: str) -> str:
    return fileio.join(output_dir.rstrip('/'), TEMP_PREFIX + check_run_id(run_id))


def plan_note(temp_dir: str, lock_token: str) -> str:
    """Where a run notes its plan (inputs per split) for the launcher of this attempt, which
    shows the progress of the conversion (pipeline/progress.py)."""
    return fileio.join(temp_dir, f'plan-{lock_token}.json')


def part_path(temp_dir: str, split: str, shard: int, chunk: int, chunk_fp: str) -> str:
    return fileio.join(temp_dir, PARTS, f'{split}-{shard:05d}-{chunk:06d}-{chunk_fp}.tfrecord')


def chunk_of_part(path: str) -> tuple[str, str]:
    """(split, chunk) of a part file's path (part_path): a chunk has a part per shard it falls
    in."""
    split, _, chunk, _ = fileio.basename(path).split('.')[0].rsplit('-', 3)
    return split, chunk


def shard_path(temp_dir: str, split: str, shard: int, shard_fp: str,
               shard_format: ShardFormat) -> str:
    return fileio.join(temp_dir, SHARDS, f'{split}-{shard:05d}-{shard_fp}.{shard_format.suffix}')


def group_path(temp_dir: str, group_fp: str) -> str:
    """The blob of a group's images (pipeline/io/image_blobs.py), kept for a rerun."""
    return fileio.join(temp_dir, GROUPS, f'{group_fp}.images')


def pairs_path(temp_dir: str, name: str) -> str:
    """A part of leakage.jsonl (transforms/findings.py), joined into it at the commit."""
    return fileio.join(temp_dir, PAIRS, f'{name}.jsonl')


def links_path(temp_dir: str, name: str) -> str:
    """A linked group of the leakage check (transforms/linked_groups.py), kept for a rerun."""
    return fileio.join(temp_dir, LINKS, name)


def listed_folder(temp_dir: str) -> str:
    """Where listing spills the inputs' refs (transforms/listing.py)."""
    return fileio.join(temp_dir, LISTED)


def filed_folder(temp_dir: str) -> str:
    """Where converted parts file their records' hashes (transforms/leakage.py)."""
    return fileio.join(temp_dir, FILED)


def work_files(temp_dir: str, folder: str, pattern: str) -> str:
    """The glob of files named `pattern` in a subfolder of work (PARTS, SHARDS, ...)."""
    return fileio.join(temp_dir, folder, pattern)


def in_format(shard_file: str, shard_format: ShardFormat) -> str:
    """The path of the same temporary shard in another format."""
    return f'{shard_file.rsplit(".", 1)[0]}.{shard_format.suffix}'


def index_file(shard_file: str) -> str:
    """The DALI index (dali_index.py) of the same temporary shard, given its file in any format."""
    return dali_index.index_path(in_format(shard_file, dali_index.FORMAT))
