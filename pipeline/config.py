"""The classic data_converter API under its short name, for configs written for that tool:

    from pipeline.config import ImageClassificationBuilder, ImageClassificationConfig

(the config class in pipeline/inputs/classic_config.py, read by the generator input kind; the
builder in pipeline/classic/).
"""
from pipeline.classic.builder import ImageClassificationBuilder
from pipeline.inputs.classic_config import ImageClassificationConfig

__all__ = ['ImageClassificationBuilder', 'ImageClassificationConfig']
