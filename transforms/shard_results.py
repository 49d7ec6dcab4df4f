"""What a part file (a chunk's records in one shard) or a shard file holds, as its sidecar keeps
it (transforms/resume.py), and the line that reports a shard."""
import dataclasses


@dataclasses.dataclass
class ShardResult:
    """What was written to one part file (chunk) or shard file."""
    split: str
    shard: int
    temp_path: str
    chunk: int | None = None
    records: int = 0
    bytes: int = 0
    label_counts: dict = dataclasses.field(default_factory=dict)   # label id -> records
    errors: int = 0          # Inputs not converted; the entries are on disk (entries.py).
    passed_through: int = 0
    seconds: float = 0.0                                           # Converting, summed.
    format_bytes: dict = dataclasses.field(default_factory=dict)   # Shard file size per format.
    # The SHA-256 of the shard file per format that rewrites the records (not TFRecord).
    format_digests: dict = dataclasses.field(default_factory=dict)
    damaged: int = 0         # Damaged JPEGs; the entries are on disk (entries.py).
    dropped: list = dataclasses.field(default_factory=list)   # (source, reason): --leakage=drop
    # Per record of a part, in order: (source, sha256, phash and mirror phash as stored (int64),
    # label id, passed through). Kept in the part's sidecar; sent on to the leakage check as a
    # table (leakage.part_table), never to the shard join.
    hashes: list = dataclasses.field(default_factory=list)
    first_record: str = ''   # records.record_digest of the first record ('' when none).
    marks: str = ''          # A part's records.content_mark of each record, in order.
    content: str = ''        # A shard's records.content_digest of its parts' marks.
    # With --dali_index, a part's records' sizes on disk (framing included), in order; a shard's
    # are its index (dali_index.py), written beside it, then dropped: `index_bytes` is its size.
    sizes: list = dataclasses.field(default_factory=list)
    index_bytes: int = 0
    # SHA-256 of the files beside it a rerun reuses with it: its entry files ('errors',
    # 'damaged'), a shard's DALI index ('index'). Its records are checked by `marks`/`content`.
    digests: dict = dataclasses.field(default_factory=dict)

    def add(self, other: 'ShardResult') -> None:
        self.first_record = self.first_record or other.first_record
        self.marks += other.marks
        self.sizes += other.sizes
        self.records += other.records
        self.bytes += other.bytes
        self.errors += other.errors
        self.passed_through += other.passed_through
        self.seconds += other.seconds
        self.damaged += other.damaged
        self.dropped += other.dropped
        for label, n in other.label_counts.items():
            self.label_counts[label] = self.label_counts.get(label, 0) + n


ShardKey = tuple[str, int]   # (split, shard)


@dataclasses.dataclass(frozen=True)
class PartDone:
    """A finished part file, as it passes through the runner: where it is, and its chunk's
    fingerprint (which names the shard with its other chunks'); the rest of its result
    (records, labels, marks, sizes, hashes) is in its sidecar (resume.py)."""
    split: str
    shard: int
    chunk: int
    temp_path: str
    fingerprint: str

    @staticmethod
    def of(result: ShardResult, fingerprint: str) -> 'PartDone':
        return PartDone(result.split, result.shard, result.chunk, result.temp_path, fingerprint)


def shows_shard(shard: int, total: int) -> bool:
    """Whether a shard gets its line: every one of up to 100, else about a hundred per split."""
    return total <= 100 or shard % (total // 100) == 0


def shard_line(result: ShardResult, total: int, reused: bool) -> str:
    """'train shard 3/16 written: 1,024 images, 127.9 MB, 2 skipped; converted at ...'."""
    if not result.records:   # Left out of the dataset: no shard is empty.
        left = [f'skipped ({result.errors})'] if result.errors or not result.dropped else []
        if result.dropped:
            left.append(f'dropped as a later-split copy ({len(result.dropped)}; see leakage.jsonl)')
        return (f'{result.split} shard {result.shard + 1}/{total}: every input '
                f'{" or ".join(left)}; no shard is written for it')
    state = 'reused from an earlier attempt' if reused else 'written'
    rate = ('' if reused or not result.seconds else
            f'; converted at {result.records / result.seconds:.0f} images/s per worker')
    return (f'{result.split} shard {result.shard + 1}/{total} {state}: {result.records} images, '
            f'{result.bytes / 1e6:.1f} MB, {result.errors} skipped{rate}')
