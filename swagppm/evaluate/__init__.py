"""Evaluation beside the mechanism: probes of a model on explicit splits, and the DP-SGD baseline."""
