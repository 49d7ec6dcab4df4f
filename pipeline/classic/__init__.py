"""The classic tensorflow/tpu data_converter API: ImageClassificationBuilder, which converts a
config (pipeline/inputs/classic_config.py), and the classic simple example."""
