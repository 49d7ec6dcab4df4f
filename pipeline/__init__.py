"""Image-classification datasets to sharded TFRecords: options, pipeline graph and entry points."""
