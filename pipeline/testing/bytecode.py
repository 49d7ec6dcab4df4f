"""Bytecode cached for the suite's and the benchmarks' processes, whatever the environment says.

The test command installs without compiling (pip --no-compile), and the suite and the
benchmarks start many Python processes, most of which import Apache Beam: where
PYTHONDONTWRITEBYTECODE is set, nothing is ever cached, so each compiled Beam (and TensorFlow,
where it is imported) afresh, ~3 s of a core a process; an edited module of the repository is
never cached again either, which a timed run would count.
"""
import os
import sys


def keep_bytecode() -> None:
    """This process and the processes it starts from now on write the bytecode of what they
    import."""
    os.environ.pop('PYTHONDONTWRITEBYTECODE', None)
    sys.dont_write_bytecode = False
