"""Forward passes through ``torch.compile``, compiled once per process and shared by every model of one shape.

``torch.compile(model)`` guards on the module object, so every new model (a new
session, a trial's own copy) would compile again: tens of seconds each on a GPU.
Here the compiled function takes the weights as inputs
(``torch.func.functional_call`` on a private template of the architecture), so one
compilation serves every model with the same architecture, parameter shapes and
dtypes, device and mode (training or evaluation), and every batch shape (dynamic
shapes). The cache lives as long as the process: a tuning worker compiles once
and every trial it runs reuses the compilation.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

Forward = Callable[[dict[str, torch.Tensor]], torch.Tensor]  # model inputs -> logits

_COMPILED: dict[tuple[object, ...], Callable[..., torch.Tensor]] = {}
_LOCK = threading.Lock()


def shape_key(model: nn.Module, *, training: bool, backend: str) -> tuple[object, ...]:
    """What a compilation depends on: the architecture, every weight's name, shape, dtype and device, the mode."""
    config: Any = getattr(model, "config", None)
    described = config.to_json_string(use_diff=False) if hasattr(config, "to_json_string") else repr(config)
    tensors = tuple((name, tuple(t.shape), t.dtype, str(t.device))
                    for name, t in (*model.named_parameters(), *model.named_buffers()))
    return type(model).__qualname__, described, tensors, training, backend


def compiled_logits(model: nn.Module, *, training: bool, backend: str = "inductor",
                    options: dict[str, Any] | None = None) -> Forward:
    """``inputs -> model(**inputs).logits`` through the process's one compilation for ``model``'s shape and mode.

    The first call for a shape copies ``model`` as the template (set to ``training``
    mode, its own weights never read) and compiles; later models of the same shape
    reuse it. ``options`` go to the compiler (e.g. ``{"fallback_random": True}``).
    """
    key = shape_key(model, training=training, backend=backend)
    with _LOCK:
        function = _COMPILED.get(key)
        if function is None:
            template = copy.deepcopy(model).train(training).requires_grad_(False)

            def logits(weights: dict[str, torch.Tensor], inputs: dict[str, torch.Tensor]) -> torch.Tensor:
                return torch.func.functional_call(template, weights, args=(), kwargs=inputs).logits

            function = torch.compile(logits, dynamic=True, backend=backend, options=options)
            _COMPILED[key] = function

    def forward(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        weights = {**dict(model.named_parameters()), **dict(model.named_buffers())}
        return function(weights, inputs)

    return forward


def compilations() -> int:
    """How many compiled functions this process holds (one per shape and mode)."""
    return len(_COMPILED)
