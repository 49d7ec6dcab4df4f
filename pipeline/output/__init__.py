"""What a conversion writes: record schema and codecs, shard formats, TFDS metadata, and the
output folder's protocol (lock, journal, temporary folders). Readers and tools import this
without the conversion job."""
