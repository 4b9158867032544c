"""What every result and release says about its privacy, in one place (no torch: the command line reads it)."""

from __future__ import annotations

CAVEATS = (
    "epsilon is a local, data-dependent bound (asymptotic differential privacy); "
    "delta is not quantified for finite samples.",
    "Choosing hyperparameters by looking at epsilon and utility on the private data is itself data-dependent; "
    "report how many configurations were tried.",
    "A tokenizer or vocabulary fitted on the private texts leaks them.",
)
RELEASE_NOISE = ("fresh operating-system entropy (128 bits from Python's secrets module) seeding the noise of this "
                 "one draw; the noise was never recorded and cannot be regenerated from anything stored")
