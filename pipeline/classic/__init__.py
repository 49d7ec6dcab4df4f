"""The classic tensorflow/tpu data_converter API (ImageClassificationConfig and -Builder)."""
