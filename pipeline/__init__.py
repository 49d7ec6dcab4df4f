"""The conversion job: flags, inputs, the Beam graph, the job API and the command line.

Sub-packages by role, in the order the data flows: inputs/ (one module per input kind, and the
archives folders may be), io/ (local and gs:// file I/O), quality/ (the damaged-JPEG verdict,
perceptual hash and pairing), output/ (record schema, shard formats, metadata, the output
folder's protocol); classic/ (the data_converter API), tools/ (verify, report, template
metadata), readers/ (tf.data, PyTorch, Grain), testing/ (shared by the tests and benchmarks)."""
