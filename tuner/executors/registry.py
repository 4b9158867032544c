"""Executors by name: ``register_executor`` adds one, ``make_executor`` builds one with its own options."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tuner.executors.base import Executor

ExecutorFactory = Callable[..., Executor]

EXECUTORS: dict[str, ExecutorFactory] = {}


def register_executor(name: str) -> Callable[[ExecutorFactory], ExecutorFactory]:
    """Register ``factory`` (an executor class, or a function of keyword options) under ``name``; once per name."""
    def register(factory: ExecutorFactory) -> ExecutorFactory:
        if name in EXECUTORS:
            raise ValueError(f"an executor named {name!r} is already registered")
        EXECUTORS[name] = factory
        return factory

    return register


def make_executor(name: str, **options: Any) -> Executor:
    """The executor ``name``, built with its keyword ``options``."""
    if name not in EXECUTORS:
        raise ValueError(f"unknown executor {name!r}; known: {', '.join(EXECUTORS)}")
    return EXECUTORS[name](**options)
