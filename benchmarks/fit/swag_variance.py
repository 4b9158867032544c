"""What SWAG's centred variance changes in ε and F1: the shipped posterior against the old float32 σ² = s − μ².

Before, SWAG's diagonal variance was the mean of squares minus the squared mean in
float32, which cancels for parameters near 1 with a small spread; now it is
accumulated centred (Welford). This runner fits the same configurations twice, each
time with a fresh private cache (stage 1 uses SWAG too): once with the shipped
posterior and once with the old formula put back for the run, and reports ε, the
F1 medians, and the share of the last posterior's σ that differ by more than half
from a float64 reference of the same snapshots.

    python -m benchmarks.fit.swag_variance --json benchmarks/fit/results/swag_variance.json

Workloads: the README's demo study (all-MiniLM-L6-v2, last layer private, synthetic
corpus) at its start point and at c = 0.5, and, when the public OSHA sample is
present, the MiniLM head on it (label ``nature``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from benchmarks import OSHA_SAMPLE, ROOT, rerun_command

CONFIGURATIONS = ((1.0, 7), (0.5, 7))


class _Spread:
    """Snapshots of the last posterior collected, kept to measure σ against a float64 reference."""

    snapshots: list[torch.Tensor] = []
    sigma: torch.Tensor | None = None


@contextlib.contextmanager
def variance_formula(old: bool) -> Iterator[None]:
    """Fits inside use the old float32 σ² = s − μ² (``old``) or the shipped centred one; σ is recorded either way."""
    from swagppm.posteriors import swag

    original_collect, original_variance = swag.SWAGPosterior.collect, swag.SWAGPosterior.variance

    def collect(self: Any, module: Any) -> None:
        original_collect(self, module)
        theta = self.view.read(module).to(self.dtype)
        if self.num_snapshots == 1:
            self._squares = torch.zeros_like(theta)
            _Spread.snapshots = []
        self._squares.add_(theta * theta)
        _Spread.snapshots.append(theta.double().cpu())

    def variance(self: Any) -> torch.Tensor:
        value = ((self._squares / self.num_snapshots - self.mean * self.mean).clamp_(min=1e-30) if old
                 else original_variance.fget(self))
        _Spread.sigma = value.sqrt().double().cpu()
        return value

    swag.SWAGPosterior.collect = collect  # type: ignore[method-assign]
    swag.SWAGPosterior.variance = property(variance)  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        swag.SWAGPosterior.collect = original_collect  # type: ignore[method-assign]
        swag.SWAGPosterior.variance = original_variance  # type: ignore[method-assign]


def sigma_error_share() -> float:
    """Share of the last posterior's σ off by more than half from σ of the same snapshots in float64."""
    reference = torch.stack(_Spread.snapshots).var(dim=0, unbiased=False).clamp(min=1e-30).sqrt()
    assert _Spread.sigma is not None
    return float(((_Spread.sigma - reference).abs() > 0.5 * reference).double().mean())


def workloads(osha: bool) -> dict[str, Any]:
    import swagppm

    demo = swagppm.SWAGPPMConfig.from_toml(ROOT / "studies" / "demo.toml")
    found = {"demo (MiniLM last layer, synthetic)": demo}
    if osha and OSHA_SAMPLE.is_file():
        found["OSHA sample (MiniLM head)"] = demo.replace(
            data={"source": str(OSHA_SAMPLE), "label_column": "nature", "max_length": 128},
            model={"trainable": "head"})
    return found


def measure(name: str, config: Any, *, old: bool) -> list[dict[str, Any]]:
    import swagppm

    rows = []
    with tempfile.TemporaryDirectory() as cache, variance_formula(old):
        with swagppm.Session(config.replace(cache_dir=cache)) as session:
            for c, epochs in CONFIGURATIONS:
                result = session.fit(swagppm.TrialParams(c=c, ft_epochs=epochs)).result
                rows.append({"workload": name, "variance": "float32 s - mu^2 (before)" if old else "centred (after)",
                             "c": c, "ft_epochs": epochs, "epsilon": result.epsilon,
                             "f1_macro_median": result.f1_macro_median,
                             "f1_weighted_median": result.f1_weighted_median,
                             "sigma_off_by_half": sigma_error_share()})
                print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None, help="write the table here")
    parser.add_argument("--no-osha", action="store_true", help="only the demo workload")
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    rows = [row for name, config in workloads(not args.no_osha).items()
            for old in (True, False) for row in measure(name, config, old=old)]
    document = {"command": rerun_command(__file__, argv), "machine": platform.processor() or platform.machine(),
                "threads": torch.get_num_threads(), "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
