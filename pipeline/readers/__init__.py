"""Readers of a finished dataset: tf.data and PyTorch."""
