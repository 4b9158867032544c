"""Labelled texts for training: read from a registered source (``sources``), then prepared (``prepare``)."""

from swagppm.data.prepare import PreparedData, prepare_data
from swagppm.data.sources import load_records
from swagppm.data.synthetic import synthetic_corpus

__all__ = ["PreparedData", "load_records", "prepare_data", "synthetic_corpus"]
