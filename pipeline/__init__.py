"""The conversion job: flags, inputs, the Beam graph, the job API and the command line.

Sub-packages by role: formats/ (record schema, shard formats, metadata, the output folder's
protocol, file I/O), classic/ (the data_converter API), tools/ (verify, report, template
metadata), readers/ (tf.data, PyTorch, Grain), testing/ (shared by the tests and benchmarks)."""
