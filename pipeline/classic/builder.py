"""ImageClassificationBuilder: runs the conversion of a config, as the classic builder did."""
import os

from apache_beam.options.pipeline_options import PipelineOptions

from pipeline import job
from pipeline.inputs.classic_config import ImageClassificationConfig

BUILDER_NAME = 'image_classification_builder'


class ImageClassificationBuilder:
    """Converts the dataset a config describes, like the old TFDS-based builder did.

    Output goes to `data_dir/image_classification_builder/<config name>/<version>/`, with shards
    named `image_classification_builder-<split>.tfrecord-NNNNN-of-NNNNN`, as before.
    """

    def __init__(self, config: ImageClassificationConfig, data_dir: str | None = None, **_ignored):
        if not isinstance(config, ImageClassificationConfig):
            raise ValueError('Provided config is not the correct type. Please provide a config '
                             'inheriting ImageClassificationConfig.')
        self.builder_config = config
        base = data_dir or os.path.join(os.path.expanduser('~'), 'tensorflow_datasets')
        self.data_dir = '/'.join([base.rstrip('/'), BUILDER_NAME, config.name, config.version])

    def download_and_prepare(self, pipeline_options: PipelineOptions | None = None,
                             **flags) -> dict:
        """Runs the conversion and returns its summary (records, shards, bytes, skipped files).

        `pipeline_options` are Beam's (runner, workers, ...); keyword arguments are converter
        flags by name, e.g. `num_shards=4, overwrite=True`.
        """
        values = (pipeline_options.get_all_options(drop_default=True, retain_unknown_options=True)
                  if pipeline_options is not None else {})
        values.update(flags)
        values.setdefault('dataset_name', BUILDER_NAME)
        values.setdefault('output_dir', self.data_dir)
        return job.convert(config=self.builder_config, **values)
