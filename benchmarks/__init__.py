"""Speed and memory benchmarks (not part of the test suite): python -m benchmarks.benchmark."""
