"""``swagppm-tune``: the command line. For now one verb, ``fit``: one SWAG-PPM fit from a study file."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import swagppm


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swagppm-tune", description=__doc__)
    verbs = parser.add_subparsers(dest="verb", required=True)
    fit = verbs.add_parser("fit", help="one SWAG-PPM fit outside any study (the manual loop)")
    fit.add_argument("study", type=Path, help="study TOML file ([data], [model], [swagppm] tables)")
    fit.add_argument("--c", type=float, default=1.0, help="weight slope c (default 1.0)")
    fit.add_argument("--ft-epochs", type=int, default=7, help="weighted fine-tuning epochs (default 7)")
    fit.add_argument("--g", type=float, default=0.0, help="weight intercept g (default 0.0)")
    fit.add_argument("--stop-above", type=float, default=None, help="stop privacy draws once a max delta exceeds this")
    fit.add_argument("--json", type=Path, default=None, help="also write the (aggregate) result to this JSON file")
    fit.add_argument("--release", type=Path, default=None, help="release one draw of this configuration to a folder")
    fit.add_argument("--force", action="store_true", help="release even a data-derived tokenizer (demos only)")
    return parser


def format_result(result: swagppm.SWAGPPMResult) -> str:
    """One line per fit: c, epochs, ε, F1 medians against the baseline, time."""
    if result.failure:
        return f"c={result.c:.3f} epochs={result.ft_epochs:>2}  FAILED: {result.failure}"
    bound = ">=" if result.epsilon_is_lower_bound else "="
    return (
        f"c={result.c:.3f} epochs={result.ft_epochs:>2}  eps{bound}{result.epsilon:.3f}  "
        f"F1 macro {result.f1_macro_median:.3f} (baseline {result.baseline_f1_macro:.3f})  "
        f"F1 weighted {result.f1_weighted_median:.3f} (baseline {result.baseline_f1_weighted:.3f})  "
        f"{result.timings.get('total', 0.0):.1f}s{'  [stage 1 cached]' if result.stage1_cache_hit else ''}"
    )


def _fit(args: argparse.Namespace) -> int:
    config = swagppm.SWAGPPMConfig.from_toml(args.study)
    result = swagppm.run_fit(config, c=args.c, ft_epochs=args.ft_epochs, g=args.g, stop_above=args.stop_above,
                             progress=True)
    print(format_result(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result.to_dict(), indent=2))
    if args.release is not None:
        out = swagppm.release(config, c=args.c, ft_epochs=args.ft_epochs, g=args.g, out_dir=args.release,
                              force=args.force, progress=True)
        print(f"released one draw to {out}")
    return 1 if result.failure else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _fit(args)
    except (swagppm.ConfigError, swagppm.DataError, swagppm.ReleaseRefused, swagppm.TrainingFailure) as error:
        print(f"swagppm-tune: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
