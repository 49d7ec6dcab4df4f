"""Speed and memory benchmarks (not part of the test suite): python -m benchmarks.benchmark.

The processes a benchmark times import the repository's modules and Beam with their bytecode
cached, as an installed package has it (pipeline/testing/bytecode.py).
"""
from pipeline.testing.bytecode import keep_bytecode

keep_bytecode()
