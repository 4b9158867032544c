"""Study files shipped with the package (``swagppm-tune demo`` writes the demo one out)."""
