"""Speed and memory benchmarks (not part of the test suite): python -m benchmarks.benchmark.

The processes a benchmark times import the repository's modules and Beam with their bytecode
cached, as an installed package has it: where PYTHONDONTWRITEBYTECODE is set, each would compile
every module it imports afresh (an edited module is never cached again), which a timed run
would count.
"""
import os
import sys

os.environ.pop('PYTHONDONTWRITEBYTECODE', None)
sys.dont_write_bytecode = False
