"""The ground floor: the types every layer shares (a run's settings, an input's ref, the split
names, the choices of --leakage and --damaged_images) and how they are fingerprinted. It imports
only the standard library, pipeline/errors.py and pipeline/io/, so inputs never import the Beam
stages and the flags never import a worker's codecs."""
