"""A verb of ``swagppm-tune``: its name and help, the arguments it declares, what it runs; the exit statuses."""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
from typing import ClassVar

EXIT_OK = 0
EXIT_INFEASIBLE = 1
EXIT_BAD_INPUT = 2
EXIT_STORAGE_LOST = 3
EXIT_INTERNAL = 4
EXIT_FIT_FAILED = 5
EXIT_NOT_REPRODUCED = 6
EXIT_AUDIT_REFUTED = 7
EXIT_PUSH_FAILED = 8
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141


class Command(ABC):
    """One verb. ``run`` returns its exit status; errors are raised and mapped to a status by ``tuner.cli.main``."""

    name: ClassVar[str]
    help: ClassVar[str]

    @abstractmethod
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Declare the verb's arguments on its own parser."""

    @abstractmethod
    def run(self, args: argparse.Namespace) -> int:
        """Do the verb's work; its exit status."""
