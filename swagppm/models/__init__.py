"""The classifier: built from a public model or the tiny preset (``build``), with pooled and partial variants, and
its standard form for a release (``standard``).

Importing this package registers the pooled classifier with transformers' Auto
classes, so that a released folder holding one loads with plain
``AutoModelForSequenceClassification.from_pretrained(folder)`` or ``pipeline(...)`` in
this process (``swagppm.models.pooled.register_auto_classes``).
"""

from swagppm.models.pooled import register_auto_classes

register_auto_classes()
