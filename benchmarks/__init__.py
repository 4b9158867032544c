"""Benchmarks of swagppm-tuner: inputs -> runner -> results, indexed in ``benchmarks/README.md``.

Every runner is a module run from the repository root (``python -m benchmarks.fit.bench_fit``);
the prepared GPU check also runs as a file (``python benchmarks/gpu/check.py``).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The public OSHA sample, in the ``data`` folder of a ``shared`` folder beside the checkout.
OSHA_SAMPLE = ROOT.parent / "shared" / "data" / "osha_sample.jsonl"


def rerun_command(module_file: str, argv: Sequence[str] | None = None) -> str:
    """The command that reruns the runner in ``module_file`` with ``argv`` (default: this process's arguments).

    Every result file records it, so that the file says how to regenerate itself.
    """
    module = Path(module_file).resolve().relative_to(ROOT).with_suffix("")
    arguments = sys.argv[1:] if argv is None else list(argv)
    return shlex.join(["python", "-m", ".".join(module.parts), *arguments])
