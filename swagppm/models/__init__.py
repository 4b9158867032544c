"""The classifier: built from a public model or the tiny preset (``build``), with pooled and partial variants."""
