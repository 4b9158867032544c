"""Where a study's trials run, by name: ``sequential`` (this process), ``processes`` (local worker processes) and
``submitit`` (cluster jobs: Slurm, or local processes for tests).

``make_executor(name, **options)`` builds one; ``register_executor(name)`` adds
another (an ``Executor``: ``run(config, *, n_trials, timeout, echo) -> RunSummary``).
"""

from __future__ import annotations

from tuner.executors.base import Executor
from tuner.executors.cluster import SubmititExecutor
from tuner.executors.processes import ProcessesExecutor, run_workers
from tuner.executors.registry import EXECUTORS, ExecutorFactory, make_executor, register_executor
from tuner.executors.sequential import SequentialExecutor

__all__ = ["EXECUTORS", "Executor", "ExecutorFactory", "ProcessesExecutor", "SequentialExecutor", "SubmititExecutor",
           "make_executor", "register_executor", "run_workers"]
