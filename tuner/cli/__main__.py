"""``python -m tuner.cli``: the ``swagppm-tune`` command (worker processes start this way)."""

import sys

from tuner.cli import main

sys.exit(main())
