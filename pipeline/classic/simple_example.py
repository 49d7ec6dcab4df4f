"""A custom ImageClassificationConfig, as in the classic data_converter's simple_example.py.

    python -m pipeline.classic.simple_example --save_dir ./simple_tfrecords

Generates random JPEG/PNG images over N classes and three splits, describes them with a config
class whose example_generator yields {'image_fobj', 'label'} dicts, and converts them with
ImageClassificationBuilder on DirectRunner.
"""
import argparse
import os
import sys
import tempfile

from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.classic.builder import ImageClassificationBuilder
from pipeline.inputs.classic_config import ImageClassificationConfig
from pipeline import console
from pipeline.sample_data import write_sample_dataset


class SimpleDatasetConfig(ImageClassificationConfig):
    """Images in ROOT/<mode>/<class name>/<file>."""

    def __init__(self, num_classes: int, root_path: str, **kwargs):
        super().__init__(version='0.1.0', supported_versions=[], **kwargs)
        self.num_classes = num_classes
        self.root_path = os.path.expanduser(root_path)

    @property
    def supported_modes(self):
        return ['train', 'test', 'validation']

    @property
    def num_labels(self):
        return self.num_classes

    def example_generator(self, mode):
        mode_path = os.path.join(self.root_path, mode)
        for class_name in os.listdir(mode_path):
            class_dir = os.path.join(mode_path, class_name)
            for image_name in os.listdir(class_dir):
                yield {'image_fobj': open(os.path.join(class_dir, image_name), 'rb'),
                       'label': class_name}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--num_classes', type=int, default=10)
    parser.add_argument('--data_path', help='Where to generate the images (default: a temporary '
                                            'folder, removed at the end).')
    parser.add_argument('--save_dir', default='simple_tfrecords',
                        help='Where to write the TFRecords (default: ./simple_tfrecords).')
    args, beam_args = parser.parse_known_args()
    with (console.showing(sys.stderr),
          tempfile.TemporaryDirectory(prefix='simple_images_') as generated):
        data_path = write_sample_dataset(args.data_path or generated, args.num_classes)
        config = SimpleDatasetConfig(name='simple', description='A simple fake dataset',
                                     num_classes=args.num_classes, root_path=data_path)
        builder = ImageClassificationBuilder(config=config, data_dir=args.save_dir)
        summary = builder.download_and_prepare(PipelineOptions(beam_args), overwrite=True)
    print(f'Saved {sum(s["records"] for s in summary["splits"].values())} records to '
          f'{builder.data_dir}')


if __name__ == '__main__':
    main()
