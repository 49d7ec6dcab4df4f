"""The dataset format, on its own: record schema and codecs, TFDS metadata, file I/O (local and
gs://), and the one error type. Readers and tools import this without the conversion job."""
