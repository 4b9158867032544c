"""Wall time per stage of a fit, honest on CUDA (the current stream is synchronised at each stage's end)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch


class StageTimer:
    """Seconds per named stage; a stage timed twice adds up."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            if self.device.type == "cuda":  # the fit's own stream: fits side by side do not wait for each other
                torch.cuda.current_stream(self.device).synchronize()
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - start
