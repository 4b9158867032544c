"""Samplers by name (a registry), the optional stop rule, and the samplers this project adds to Optuna's.

``[study] sampler`` names one of ``SAMPLERS``: ``tpe`` (``DistinctTPESampler``, the
default), ``gp``, ``nsga2``, ``random`` and ``flowchart`` (``FlowchartSampler``, the
guide's procedure). ``register_sampler(name)(factory)`` adds another, with the
``SamplerTraits`` a study file is checked by; a sampler whose procedure can end by
itself implements ``StopRule``, which the run loop finds with ``stop_rule_of``.
"""

from __future__ import annotations

from tuner.samplers.base import SamplerFactory, SamplerTraits, StopRule, stop_rule_of
from tuner.samplers.registry import SAMPLERS, RegisteredSampler, make_sampler, register_sampler, sampler_traits

# Registered in this order, the order a study file's error lists them in.
from tuner.samplers.tpe import DistinctTPESampler  # isort: skip
from tuner.samplers.builtin import gp_sampler, nsga2_sampler, random_sampler  # isort: skip
from tuner.samplers.flowchart import FlowchartSampler  # isort: skip

__all__ = ["SAMPLERS", "DistinctTPESampler", "FlowchartSampler", "RegisteredSampler", "SamplerFactory",
           "SamplerTraits", "StopRule", "make_sampler", "register_sampler", "sampler_traits", "stop_rule_of"]
