"""Tuning: tables of real fits over (c, epochs), and tuner studies replayed on them."""
