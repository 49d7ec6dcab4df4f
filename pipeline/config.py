"""The classic data_converter API under its short name, for configs written for that tool:

    from pipeline.config import ImageClassificationBuilder, ImageClassificationConfig

(defined in pipeline/classic/).
"""
from pipeline.classic.builder import ImageClassificationBuilder
from pipeline.classic.config import ImageClassificationConfig

__all__ = ['ImageClassificationBuilder', 'ImageClassificationConfig']
