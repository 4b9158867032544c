"""Releasing one fit: the secret draw and its files (``writer``), the public card, and private selection."""
