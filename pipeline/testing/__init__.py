"""What the tests and the benchmarks share: generated images, small datasets converted,
verified and edited in-process, and a Cloud Storage emulator with a metadata endpoint on
127.0.0.1. Imported by tests/ and benchmarks/ only, never by the product."""
