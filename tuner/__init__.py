"""Optuna studies over SWAG-PPM's (c, fine-tuning epochs), and the ``swagppm-tune`` command.

Until the tuner issue lands this holds the command line's ``fit`` verb: one
SWAG-PPM fit from a study file, outside any study.
"""
