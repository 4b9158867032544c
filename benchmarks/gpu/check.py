"""The one prepared GPU check: paper-scale throughput of a SWAG-PPM trial on one H100 or H200 first, then the
sections that compare against it, then the CUDA tests, as one JSON.

Runs in at most 8 minutes on a bare GPU machine with only torch, transformers, numpy,
scikit-learn, pandas and tqdm (nothing installed, nothing downloaded, nothing read from
outside the checkout: the model is DistilRoBERTa-shaped with random weights, the corpus
synthetic). The sections are the ``SECTIONS`` table below, run in its order (what
matters first) or in the order ``--sections`` names them. Before each one the check
prints its budget (the seconds it needs left to start) and the seconds left; a section
that does not fit in what is left is skipped and said so. The JSON is rewritten before
and after every section (``running`` names the one under way), so a call cut short
still returns every figure measured so far. Output is unbuffered (the script sets
``PYTHONUNBUFFERED`` for its subprocesses and line-buffers its own), so a cut call's log
shows how far it got:

    PYTHONUNBUFFERED=1 python benchmarks/gpu/check.py --out gpu_check.json     # on the GPU machine
    python benchmarks/gpu/check.py --smoke --out smoke.json                      # a CPU dry run (the test suite's)
    python benchmarks/gpu/check.py --quick --sections trial,fused_step --out quick.json  # GPU paths in minutes
    python benchmarks/gpu/check.py --list                                        # the sections, in order

``--smoke`` runs every section that means something on a CPU (the CUDA tests are
collected and skipped, the compiled sections are left out); with ``OMP_NUM_THREADS=1``
it takes about a minute on a CPU core.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import multiprocessing as mp
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from copy import deepcopy
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository's packages, on a machine where the project is not installed
sys.path.append(str(ROOT / ".gpu-deps"))  # pure-Python extras carried to a bare machine (pyro-ppl for `exact`)

import torch  # noqa: E402
import transformers  # noqa: E402

import swagppm  # noqa: E402
from benchmarks.gpu.flops import forward_flops, training_flops  # noqa: E402
from swagppm import TrialParams  # noqa: E402
from swagppm.side_by_side import fit_side_by_side, trials_that_fit  # noqa: E402
from swagppm.stage1 import compute_or_load  # noqa: E402
from swagppm.stage2 import fit  # noqa: E402
from swagppm.train import compiled, rng  # noqa: E402
from swagppm.train.engine import EpochInfo, Net, adamw, sgd, train  # noqa: E402

PEAK_TFLOPS = 989.0  # H100/H200 dense bf16
MFU_COUNTS = "non-embedding matrix-multiply FLOPs over the real tokens (benchmarks/gpu/flops.py)"
PAPER = {"ft_epochs": 7, "swag_epochs": 20, "draws_privacy": 500, "draws_utility": 30}


@dataclass(frozen=True)
class Sizes:
    """The workload: corpus, model and counts (the paper's on a GPU, tiny for the CPU smoke run)."""

    records: int
    hidden: int
    layers: int
    heads: int
    vocab: int
    stage1_epochs: int
    swag_epochs: int
    ft_epochs: int
    draws_risk: int
    draws_privacy: int
    draws_utility: int
    sweep_repeats: int
    concurrent: tuple[int, ...]
    concurrent_draws: int  # privacy draws of each concurrent (reduced) trial
    budget_s: float


GPU = Sizes(records=10_692, hidden=768, layers=6, heads=12, vocab=50_265, stage1_epochs=1, swag_epochs=20,
            ft_epochs=7, draws_risk=20, draws_privacy=500, draws_utility=30, sweep_repeats=3, concurrent=(1, 2, 4),
            concurrent_draws=40, budget_s=470.0)
QUICK = Sizes(records=10_692, hidden=768, layers=6, heads=12, vocab=50_265, stage1_epochs=1, swag_epochs=2,
              ft_epochs=1, draws_risk=5, draws_privacy=50, draws_utility=5, sweep_repeats=3, concurrent=(1,),
              concurrent_draws=10, budget_s=240.0)
SMOKE = Sizes(records=120, hidden=32, layers=1, heads=2, vocab=400, stage1_epochs=1, swag_epochs=2, ft_epochs=1,
              draws_risk=3, draws_privacy=4, draws_utility=2, sweep_repeats=1, concurrent=(1, 2),
              concurrent_draws=3, budget_s=1200.0)  # a busy CPU: every section must run


class Report:
    """The JSON document, rewritten before and after every section so that a run cut short still reports what it
    measured (and, in ``running``, which section it was cut in)."""

    def __init__(self, path: Path, started: float, budget_s: float) -> None:
        self.path, self.started, self.budget_s = path, started, budget_s
        self.document: dict[str, Any] = {"sections_skipped": {}, "budgets_s": {}}

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.started)

    def write(self) -> None:
        self.document["elapsed_s"] = round(time.perf_counter() - self.started, 1)
        self.path.write_text(json.dumps(self.document, indent=1, default=str) + "\n")

    def section(self, name: str, needs_s: float, action: Callable[[], dict[str, Any]]) -> None:
        left = self.left()
        self.document["budgets_s"][name] = needs_s
        if left < needs_s:
            self.document["sections_skipped"][name] = f"{left:.0f} s left of the budget, {needs_s:.0f} s needed"
            print(f"gpu check: {name} skipped: budget {needs_s:.0f} s, {left:.0f} s left", file=sys.stderr)
            self.write()
            return
        print(f"gpu check: {name}: budget {needs_s:.0f} s, {left:.0f} s left", file=sys.stderr)
        self.document["running"] = name
        self.write()
        began = time.perf_counter()
        try:
            self.document[name] = action()
        except Exception as error:  # one broken section must not lose the others
            self.document[name] = {"error": f"{type(error).__name__}: {error}",
                                   "traceback": traceback.format_exc(limit=4)}
        self.document[name + "_wall_s"] = round(time.perf_counter() - began, 1)
        del self.document["running"]
        self.write()
        print(f"gpu check: {name} done in {self.document[name + '_wall_s']} s, {self.document['elapsed_s']} s "
              "elapsed", file=sys.stderr)


def environment(device: torch.device) -> dict[str, Any]:
    info: dict[str, Any] = {"torch": torch.__version__, "transformers": transformers.__version__,
                            "python": platform.python_version(), "device": str(device)}
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        info |= {"gpu": properties.name, "gpu_memory_gib": round(properties.total_memory / 2**30, 1)}
    return info


def workload(workdir: Path, sizes: Sizes, device: torch.device) -> swagppm.SWAGPPMConfig:
    """The paper-shaped corpus and model on disk, and the configuration of the main trial."""
    from benchmarks.fit.bench_fit import save_paper_model, write_paper_corpus

    corpus = workdir / "corpus.jsonl"
    texts = write_paper_corpus(corpus, sizes.records)
    save_paper_model(workdir / "model", texts, hidden=sizes.hidden, layers=sizes.layers, heads=sizes.heads,
                     vocab=sizes.vocab)
    return swagppm.SWAGPPMConfig(
        data=swagppm.DataConfig(source=str(corpus), max_length=128),
        model=swagppm.ModelConfig(name_or_path=str(workdir / "model"), pooling="native"),
        stage1_epochs=sizes.stage1_epochs, swag_epochs=sizes.swag_epochs, draws_risk=sizes.draws_risk,
        draws_privacy=sizes.draws_privacy, draws_utility=sizes.draws_utility, device=device.type,
        cache_dir=str(workdir / "cache"))


def timed(action: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Median seconds of ``action`` over ``repeats`` calls after one warm-up call."""
    action()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        action()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def sweeps(session: swagppm.Session, sizes: Sizes) -> dict[str, Any]:
    """Seconds of one forward sweep over the training split per precision, batch size and compilation."""
    device, model, split = session.device, session.bundle.model, session.train
    on_cuda = device.type == "cuda"
    model.eval()
    rows: dict[str, Any] = {"records": len(split), "tokens": split.num_tokens}

    def sweep(net: Net, batch: int) -> Callable[[], object]:
        return lambda: net.per_record_nll(split, batch)

    def with_tf32(enabled: bool, action: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            saved = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = enabled
            try:
                return action()
            finally:
                torch.backends.cuda.matmul.allow_tf32 = saved
        return run

    fp32 = Net(model, None, device=device, amp=False)
    bf16 = Net(model, None, device=device, amp=on_cuda)
    rows["float32_b1024_s"] = timed(with_tf32(False, sweep(fp32, 1024)), device, sizes.sweep_repeats)
    if on_cuda:
        rows["tf32_b1024_s"] = timed(with_tf32(True, sweep(fp32, 1024)), device, sizes.sweep_repeats)
        rows["bf16_b256_s"] = timed(sweep(bf16, 256), device, sizes.sweep_repeats)
        rows["bf16_b1024_s"] = timed(sweep(bf16, 1024), device, sizes.sweep_repeats)
    return rows


def compiled_sweep(session: swagppm.Session, sizes: Sizes) -> dict[str, Any]:
    """The bf16 sweep eager (the baseline) and through the process's compilation (dynamic shapes): compile seconds,
    sweep seconds, TFLOP/s, and the first sweep of a second model of the same shape (no new compilation)."""
    device, model, split = session.device, session.bundle.model, session.train
    model.eval()
    on_cuda = device.type == "cuda"
    eager = Net(model, None, device=device, amp=on_cuda)
    eager_s = timed(lambda: eager.per_record_nll(split, 1024), device, sizes.sweep_repeats)
    started = time.perf_counter()
    fast = Net(model, None, device=device, amp=on_cuda, compile_eval=True)
    fast.per_record_nll(split, 1024)
    if on_cuda:
        torch.cuda.synchronize(device)
    compile_s = time.perf_counter() - started
    seconds = timed(lambda: fast.per_record_nll(split, 1024), device, sizes.sweep_repeats)
    twin = Net(deepcopy(model), None, device=device, amp=on_cuda, compile_eval=True)
    started = time.perf_counter()
    twin.per_record_nll(split, 1024)
    if on_cuda:
        torch.cuda.synchronize(device)
    assert split.lengths is not None
    return {"bf16_eager_b1024_s": eager_s, "compile_s": compile_s, "bf16_compiled_b1024_s": seconds,
            "speedup": eager_s / seconds, "second_model_first_sweep_s": time.perf_counter() - started,
            "compilations_in_process": compiled.compilations(),
            "tflops_per_s": forward_flops(model, split.lengths) / seconds / 1e12, "counts": MFU_COUNTS}


def fused_step(session: swagppm.Session) -> dict[str, Any]:
    """Two fine-tuning epochs from CUDA graphs: uncompiled steps (the baseline) against compiled forward and backward
    inside the graphs, from one start and one dropout seed (so their losses compare). The first epoch holds the
    capture (and the compilation), the second is the steady rate."""
    device, config, split = session.device, session.config, session.train
    saved = session.bundle.trainable_state()
    steps = math.ceil(len(split) / config.batch_size)
    rows: dict[str, Any] = {"steps_per_epoch": steps}
    try:
        for name, compile_train in (("graphs", False), ("graphs_compiled", True)):
            session.bundle.reset(saved)
            net = Net(session.bundle.model, None, device=device, amp=session.net.amp, graphs=device.type == "cuda",
                      compile_train=compile_train)
            optimizer, scheduler = adamw(net, lr=config.learning_rates[0], weight_decay=0.01, total_steps=2 * steps)
            ends: list[float] = []

            def ended(info: EpochInfo, ends: list[float] = ends) -> None:
                ends.append(time.perf_counter())  # train() read the epoch's loss: the device has finished it

            started = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught, rng.seeded_global_rng(0, "fused", device=device):
                warnings.simplefilter("always", RuntimeWarning)
                history = train(net, split, stage="fused", epochs=2, optimizer=optimizer, scheduler=scheduler,
                                batch_size=config.batch_size, generator=torch.Generator().manual_seed(0),
                                on_epoch=ended)
            rows[name] = {"first_epoch_s": ends[0] - started, "epoch_s": ends[1] - ends[0],
                          "losses": [h.mean_loss for h in history],
                          "warnings": [str(w.message).splitlines()[0] for w in caught]}
        rows["speedup"] = rows["graphs"]["epoch_s"] / rows["graphs_compiled"]["epoch_s"]
    finally:
        session.bundle.reset(saved)
    return rows


def _reduced(config: swagppm.SWAGPPMConfig, sizes: Sizes, folder: str, **changes: Any) -> swagppm.SWAGPPMConfig:
    """Reduced trials (1 stage-1 epoch, 2 SWAG epochs, 2 risk and utility draws) with a stage-1 cache of their own."""
    return config.replace(stage1_epochs=1, swag_epochs=2, draws_risk=2, draws_privacy=sizes.concurrent_draws,
                          draws_utility=2, cache_dir=str(Path(str(config.cache_dir)) / folder), **changes)


def draw_pruning(config: swagppm.SWAGPPMConfig, sizes: Sizes) -> dict[str, Any]:
    """A reduced trial (c = 1) with all its privacy draws (the baseline) and with them stopped once its running ε
    exceeds that of a first trial (c = 0.5, the "best feasible" one), as ``tuner.pruning.DrawPruner`` stops them."""
    with swagppm.Session(_reduced(config, sizes, "pruning")) as session:
        stage1 = compute_or_load(session)
        best = fit(session, stage1, swagppm.TrialParams(c=0.5, ft_epochs=1)).result
        rows: dict[str, Any] = {"trial": "fine-tune 1 epoch, SWAG 2 epochs, "
                                         f"{sizes.concurrent_draws} privacy and 2 utility draws",
                                "best": {"c": 0.5, "epsilon": best.epsilon}}
        runs = {}
        for name, on_draws in (("full", None), ("pruned", lambda draws, epsilon: epsilon > best.epsilon)):
            runs[name] = result = fit(session, stage1, swagppm.TrialParams(c=1.0, ft_epochs=1),
                                      on_draws=on_draws).result
            rows[name] = {"epsilon": result.epsilon, "epsilon_is_lower_bound": result.epsilon_is_lower_bound,
                          "privacy_draws": len(result.max_delta), "privacy_s": result.timings.get("privacy", 0.0),
                          "utility_s": result.timings.get("utility", 0.0), "total_s": result.timings["total"]}
    full, pruned = runs["full"], runs["pruned"]
    def draw_seconds(name: str) -> float:
        return float(rows[name]["privacy_s"] + rows[name]["utility_s"])

    rows |= {"draws_saved": 1 - len(pruned.max_delta) / max(len(full.max_delta), 1),
             "draw_seconds_saved": 1 - draw_seconds("pruned") / draw_seconds("full"),
             "same_draws_before_the_stop": pruned.max_delta == full.max_delta[: len(pruned.max_delta)]}
    return rows


def side_by_side(config: swagppm.SWAGPPMConfig, sizes: Sizes) -> dict[str, Any]:
    """Two reduced trials in turn (the baseline) against side by side in one process (``swagppm.side_by_side``):
    wall seconds, and whether each gave the ε it gives alone."""
    trials = [swagppm.TrialParams(c=1.0, ft_epochs=1), swagppm.TrialParams(c=0.7, ft_epochs=1, seed=1)]
    with swagppm.Session(_reduced(config, sizes, "side")) as session:
        stage1 = compute_or_load(session)
        fit(session, stage1, trials[0])  # warm-up, not timed: compiled passes, CUDA graphs, allocations
        device = session.device
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        started = time.perf_counter()
        alone = [fit(session, stage1, params).result for params in trials]
        in_turn_s = time.perf_counter() - started
        started = time.perf_counter()
        together = [f.result for f in fit_side_by_side(session, stage1, trials)]
        side_s = time.perf_counter() - started
        capacity = trials_that_fit(session)
        peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else 0.0
    return {"trials": len(trials), "in_turn_s": in_turn_s, "side_by_side_s": side_s, "speedup": in_turn_s / side_s,
            "epsilons_alone": [r.epsilon for r in alone], "epsilons_side_by_side": [r.epsilon for r in together],
            "same_epsilon": [a.epsilon == b.epsilon for a, b in zip(alone, together, strict=True)],
            "trials_that_fit": capacity, "peak_gib": peak}


# What a posterior trial runs on: (the private set, its model settings, the posteriors that cover it).
PRIVATE_SETS = (("head", {"trainable": "head", "pooling": "mean"}, ("swag", "laplace", "exact", "sgld")),
                ("last layer", {"trainable": "last_n_layers", "n_layers": 1, "pooling": "mean"}, ("swag", "sgld")))
SMOKE_POSTERIORS = {"exact_warmup": 20, "exact_samples": 10, "exact_max_rhat": 10.0, "exact_min_ess": 1.0,
                    "sgld_burnin_epochs": 0}  # the smoke run's 2 SWAG epochs: a few steps, a relaxed gate


def posteriors(config: swagppm.SWAGPPMConfig, sizes: Sizes, *, gpu: bool) -> dict[str, Any]:
    """One paper-scale trial (stage 1 reduced and cached first) per posterior, with the head and with the last layer
    private (laplace and exact cover a head only): its seconds by stage, the device's peak memory and what the
    posterior keeps per parameter. The exact sampler needs pyro-ppl, which a bare machine lacks: it is skipped with
    the reason unless pyro imports (carry it: ``pip install --target .gpu-deps --no-deps pyro-ppl pyro-api``)."""
    import importlib.util

    rows: dict[str, Any] = {}
    device = torch.device(config.device)
    for private, model, kinds in PRIVATE_SETS:
        sub = config.replace(model=model, cache_dir=str(Path(str(config.cache_dir)) / private.replace(" ", "_")),
                             **({} if gpu else SMOKE_POSTERIORS))
        with swagppm.Session(sub) as session:
            session.prepare(progress=False)
            for kind in kinds:
                name = f"{kind} ({private})"
                if kind == "exact" and importlib.util.find_spec("pyro") is None:
                    rows[name] = {"skipped": "pyro-ppl is not installed on this machine"}
                    continue
                session.config = sub.replace(posterior=kind)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                    torch.cuda.reset_peak_memory_stats(device)
                done = session.fit(TrialParams(c=1.0, ft_epochs=sizes.ft_epochs), progress=False)
                result = done.result
                peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
                rows[name] = {"trial_s": result.timings.get("total"), "timings_s": result.timings,
                              "failure": result.failure, "epsilon": result.epsilon,
                              "f1_macro_median": result.f1_macro_median if result.f1_macro else None,
                              "diagnostics": result.diagnostics, "peak_gib": peak,
                              "private_parameters": sum(p.numel() for p in session.bundle.model.parameters()
                                                        if p.requires_grad),
                              "numbers_per_parameter": None if done.posterior is None
                              else done.posterior.numbers_per_parameter()}
    return rows


def gpu_tests(budget_s: float) -> dict[str, Any]:
    """``pytest -m gpu tests/swagppm/test_gpu.py`` in a subprocess (no conftest: the machine lacks the suite's
    database packages): its exit status, summary line and failures."""
    command = [sys.executable, "-m", "pytest", "-q", "--noconftest", "-p", "no:cacheprovider", "-m", "gpu", "-rs",
               "tests/swagppm/test_gpu.py"]
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=budget_s, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {budget_s:.0f} s"}
    lines = done.stdout.strip().splitlines()
    return {"command": " ".join(["python", *command[1:]]), "returncode": done.returncode,
            "summary": lines[-1] if lines else done.stderr.strip()[-500:],
            "failures": [line for line in lines if line.startswith(("FAILED", "ERROR", "SKIPPED"))][:20]}


def trial(session: swagppm.Session, sizes: Sizes) -> dict[str, Any]:
    """Stage 1 (reduced) timed, then one trial at the paper's settings with stage 1 cached."""
    prep = session.prepare()
    result = session.fit(TrialParams(c=1.0, ft_epochs=sizes.ft_epochs)).result
    if result.failure:
        return {"stage1_s": prep.timings, "failure": result.failure}
    work = _workload(session)
    timings = result.timings
    flops = stage_flops(session, ft_epochs=sizes.ft_epochs, swag_epochs=sizes.swag_epochs,
                        privacy_draws=len(result.max_delta), utility_draws=sizes.draws_utility)
    mfu = {stage: flops[stage] / timings[stage] / 1e12 / PEAK_TFLOPS for stage in flops if timings.get(stage)}
    per_draw = timings["privacy"] / max(len(result.max_delta), 1)
    return {
        "workload": work, "stage1_timings_s": prep.timings, "timings_s": timings,
        "trial_s": timings["total"], "target_s": 90.0, "goal_s": 45.0, "met": timings["total"] <= 90.0,
        "privacy_draw_s": per_draw, "records_confirmed_per_draw": timings.get("privacy_confirmed_per_draw"),
        "records_confirmed_fraction": (timings.get("privacy_confirmed_per_draw", 0.0) / work["train_records"]),
        "epsilon": result.epsilon, "f1_macro_median": result.f1_macro_median,
        "baseline_f1_macro": result.baseline_f1_macro, "mfu": mfu, "peak_tflops": PEAK_TFLOPS,
        "mfu_counts": MFU_COUNTS,
    }


def stage_flops(session: swagppm.Session, *, ft_epochs: int, swag_epochs: int, privacy_draws: int,
                utility_draws: int) -> dict[str, int]:
    """Model FLOPs per stage of a trial: non-embedding matrix multiplies over the real tokens (``flops``)."""
    model, (train, test) = session.bundle.model, session.tokens
    assert train.lengths is not None and test.lengths is not None
    epoch, sweep = training_flops(model, train.lengths), forward_flops(model, train.lengths)
    return {"finetune": epoch * ft_epochs, "swag": epoch * swag_epochs, "privacy": sweep * privacy_draws,
            "utility": forward_flops(model, test.lengths) * utility_draws}


def _workload(session: swagppm.Session) -> dict[str, int]:
    train_tokens, test_tokens = session.tokens
    return {"train_records": len(session.train), "test_records": len(session.test),
            "train_tokens": train_tokens.num_tokens, "test_tokens": test_tokens.num_tokens,
            "parameters": sum(p.numel() for p in session.bundle.model.parameters())}


def concurrent_worker(config: dict[str, Any], ft_epochs: int, barrier: Any, results: Any) -> None:
    """One of N processes: open the shared configuration (stage 1 cached), wait for the others, run one trial."""
    try:
        transformers.logging.set_verbosity_error()
        with swagppm.Session(swagppm.SWAGPPMConfig.from_dict(config)) as session:
            session.prepare()
            if session.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(session.device)
            barrier.wait()
            started = time.perf_counter()
            result = session.fit(TrialParams(c=1.0, ft_epochs=ft_epochs)).result
            wall = time.perf_counter() - started
            peak = torch.cuda.max_memory_allocated(session.device) / 2**30 if session.device.type == "cuda" else 0.0
        results.put({"timings_s": result.timings, "wall_s": wall, "epsilon": result.epsilon, "peak_gib": peak,
                     "draws": len(result.max_delta), "failure": result.failure})
    except Exception as error:  # reported, never hangs the parent
        barrier.abort()
        results.put({"error": f"{type(error).__name__}: {error}"})


def concurrency(config: swagppm.SWAGPPMConfig, sizes: Sizes, report: Report) -> dict[str, Any]:
    """N reduced trials at once per N; per-unit rates extrapolated to the paper's trial, and trials per hour."""
    # uncompiled, as the processes were before compile_train and compile_eval (each would compile its own)
    reduced = _reduced(config, sizes, "concurrent", compile_eval=False, compile_train=False)
    with swagppm.Session(reduced) as session:  # stage 1 once, shared by every worker through the cache
        session.prepare()
    context = mp.get_context("spawn")
    rows: dict[str, Any] = {"trial": "fine-tune 1 epoch, SWAG 2 epochs, "
                                     f"{sizes.concurrent_draws} privacy and 2 utility draws per process",
                            "extrapolated_to": PAPER, "runs": {}}
    for n in sizes.concurrent:
        if report.left() < 30 * n:
            rows["runs"][n] = {"skipped": f"{report.left():.0f} s left"}
            continue
        barrier, results = context.Barrier(n), context.Queue()
        processes = [context.Process(target=concurrent_worker, args=(reduced.to_dict(), 1, barrier, results))
                     for _ in range(n)]
        for process in processes:
            process.start()
        outcomes = [results.get(timeout=max(report.left(), 30)) for _ in processes]
        for process in processes:
            process.join(timeout=30)
        rows["runs"][n] = _rates(outcomes, n, reduced.draws_utility)
    return rows


def _rates(outcomes: list[dict[str, Any]], n: int, utility_draws: int) -> dict[str, Any]:
    errors = [o["error"] for o in outcomes if "error" in o]
    if errors:
        return {"error": errors[0]}
    slowest = max(outcomes, key=lambda o: o["wall_s"])["timings_s"]
    per = {"finetune_epoch_s": slowest["finetune"], "swag_epoch_s": slowest["swag"] / 2,
           "privacy_draw_s": slowest["privacy"] / max(outcomes[0]["draws"], 1),
           "utility_draw_s": slowest.get("utility", 0.0) / utility_draws}
    trial_s = (PAPER["ft_epochs"] * per["finetune_epoch_s"] + PAPER["swag_epochs"] * per["swag_epoch_s"]
               + PAPER["draws_privacy"] * per["privacy_draw_s"] + PAPER["draws_utility"] * per["utility_draw_s"])
    epsilons = sorted({o["epsilon"] for o in outcomes})
    return {"processes": n, "per_unit_s": per, "paper_trial_s": trial_s, "trials_per_hour": n * 3600 / trial_s,
            "peak_gib_per_process": [round(o["peak_gib"], 2) for o in outcomes],
            "same_epsilon_for_same_seed": len(epsilons) == 1, "epsilons": epsilons,
            "wall_s": [round(o["wall_s"], 1) for o in outcomes]}


def ablations(session: swagppm.Session) -> dict[str, Any]:
    """One SWAG epoch with fused against unfused SGD; one fine-tuning epoch from CUDA graphs against eager steps."""
    device, config, split = session.device, session.config, session.train
    saved = session.bundle.trainable_state()
    nets = {"graphs": Net(session.bundle.model, None, device=device, amp=session.net.amp, graphs=device.type == "cuda"),
            "eager": Net(session.bundle.model, None, device=device, amp=session.net.amp)}
    rows: dict[str, Any] = {}

    def epoch(net: Net, optimizer: torch.optim.Optimizer, scheduler: Any = None) -> float:
        started = time.perf_counter()
        train(net, split, stage="ablation", epochs=1, optimizer=optimizer, scheduler=scheduler,
              batch_size=config.batch_size, generator=torch.Generator().manual_seed(0))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - started

    try:
        lr = config.learning_rates[1]
        rows["swag_epoch_fused_sgd_s"] = epoch(session.net, sgd(session.net, lr=lr, momentum=0.0))
        params = [p for p in session.bundle.model.parameters() if p.requires_grad]
        rows["swag_epoch_unfused_sgd_s"] = epoch(session.net, torch.optim.SGD(params, lr=lr, fused=False))
        for name, net in nets.items():
            session.bundle.reset(saved)
            optimizer, scheduler = adamw(net, lr=config.learning_rates[0], weight_decay=0.01,
                                         total_steps=math.ceil(len(split) / config.batch_size))
            rows[f"finetune_epoch_{name}_s"] = epoch(net, optimizer, scheduler)
    finally:
        session.bundle.reset(saved)
    return rows


@dataclass(frozen=True, kw_only=True)
class Context:
    """What a section runs on: the main trial's configuration and session (one model, built once), the sizes, the
    report (for the seconds left), and whether this is a GPU run."""

    config: swagppm.SWAGPPMConfig
    session: swagppm.Session
    sizes: Sizes
    report: Report
    gpu: bool


@dataclass(frozen=True, kw_only=True)
class Section:
    """One section of the check: its name (its key in the JSON), what it measures, the seconds it needs left to start
    on a GPU and in the CPU smoke run, whether the smoke run includes it, and what it runs."""

    name: str
    about: str
    gpu_s: float
    smoke_s: float
    run: Callable[[Context], dict[str, Any]]
    on_cpu: bool = True  # False: compiling says nothing on a CPU, so the smoke run leaves it out

    def budget_s(self, context: Context) -> float:
        return self.gpu_s if context.gpu else self.smoke_s


# The sections, in the order a full run takes them: what matters first. The paper-scale trial (the bar is about its
# seconds) leads, then what compares against it, then the CUDA tests (`pytest -m gpu` also runs them on their own).
# The posteriors (swag, laplace, exact, sgld) follow it: each one's paper-scale trial with the head and with the last
# layer private, and the memory each needs.
SECTIONS: tuple[Section, ...] = (
    Section(name="trial", gpu_s=200, smoke_s=60, run=lambda c: trial(c.session, c.sizes),
            about="stage 1 reduced (fine-tune 1 epoch, 20 risk draws, the paper's 20 SWAG epochs), then one trial at "
                  "the paper's settings (7 fine-tuning and 20 SWAG epochs, 500 privacy and 30 utility draws) with "
                  "stage 1 cached: seconds per stage, records confirmed at float32 per privacy draw, MFU over the "
                  "non-embedding matrix-multiply FLOPs of the real tokens (flops.py)"),
    Section(name="posteriors", gpu_s=150, smoke_s=120, run=lambda c: posteriors(c.config, c.sizes, gpu=c.gpu),
            about="one paper-scale trial per posterior (swag, laplace, exact, sgld) with the head private and (swag, "
                  "sgld) with the last layer private, stage 1 reduced and cached first: seconds by stage, peak device "
                  "memory, numbers kept per private parameter (exact needs pyro-ppl: skipped without it)"),
    Section(name="side_by_side", gpu_s=60, smoke_s=60, run=lambda c: side_by_side(c.config, c.sizes),
            about="two reduced trials in turn (the baseline) against side by side in one process "
                  "(swagppm.side_by_side): wall seconds and equal epsilon"),
    Section(name="concurrency", gpu_s=60, smoke_s=60, run=lambda c: concurrency(c.config, c.sizes, c.report),
            about="N = 1, 2, 4 reduced trials at once on the one GPU (N worker processes, uncompiled, stage 1 shared "
                  "through the cache), their rates extrapolated to the paper's trial: trials per hour, peak memory "
                  "per process, equal epsilon for equal seeds"),
    Section(name="draw_pruning", gpu_s=45, smoke_s=45, run=lambda c: draw_pruning(c.config, c.sizes),
            about="a reduced trial's privacy draws with and without the stop on the best feasible trial's epsilon "
                  "(tuner.pruning.DrawPruner): draws and seconds"),
    Section(name="fused_step", gpu_s=90, smoke_s=90, run=lambda c: fused_step(c.session), on_cpu=False,
            about="one fine-tuning epoch from CUDA graphs, uncompiled (the baseline), against compiled forward and "
                  "backward inside the graphs (compile time apart)"),
    Section(name="compiled_sweep", gpu_s=60, smoke_s=60, run=lambda c: compiled_sweep(c.session, c.sizes),
            on_cpu=False,
            about="the bf16 sweep eager (the baseline) and through torch.compile (compile time apart; after the trial "
                  "it may reuse the trial's compilation), and a second model of the same shape"),
    Section(name="sweeps", gpu_s=15, smoke_s=15, run=lambda c: sweeps(c.session, c.sizes),
            about="one forward sweep over the training records at float32, TF32 and bf16 (evaluation batches of "
                  "256 and 1,024)"),
    Section(name="ablations", gpu_s=20, smoke_s=20, run=lambda c: ablations(c.session),
            about="one SWAG epoch with fused against unfused SGD, one fine-tuning epoch from CUDA graphs against "
                  "eager steps"),
    Section(name="tests", gpu_s=150, smoke_s=60,
            run=lambda c: gpu_tests(min(max(c.report.left() - 10, 30), 150)),
            about="pytest -m gpu tests/swagppm/test_gpu.py (the screened maximum equals a float32 sweep, graphed and "
                  "compiled steps equal eager ones, fits side by side give the epsilon of each alone): its summary "
                  "line and exit status"),
)
SECTION_NAMES = tuple(section.name for section in SECTIONS)


def chosen_sections(names: str | None) -> tuple[Section, ...]:
    """The sections ``--sections`` names, in the order it names them (default: all, in the table's order)."""
    if names is None:
        return SECTIONS
    by_name = {section.name: section for section in SECTIONS}
    asked = [name.strip() for name in names.split(",") if name.strip()]
    if unknown := sorted(set(asked) - set(by_name)):
        raise ValueError(f"--sections: unknown {', '.join(unknown)}; known: {', '.join(SECTION_NAMES)}")
    if repeated := sorted({name for name in asked if asked.count(name) > 1}):
        raise ValueError(f"--sections: {', '.join(repeated)} named twice")
    return tuple(by_name[name] for name in asked)


def listing() -> str:
    """The sections in order, with their GPU budgets and what each measures (``--list``)."""
    return "\n".join(f"{number}. {section.name} ({section.gpu_s:.0f} s on a GPU"
                     f"{'' if section.on_cpu else ', not in --smoke'}): {section.about}"
                     for number, section in enumerate(SECTIONS, start=1))


def unbuffered() -> None:
    """Every line shows when it is written, so that a call cut short still shows how far it got: this process's
    output line by line, and the subprocesses' (the CUDA tests, the concurrent workers) through PYTHONUNBUFFERED."""
    os.environ["PYTHONUNBUFFERED"] = "1"
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(line_buffering=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="sections, in order:\n" + listing())
    parser.add_argument("--smoke", action="store_true", help="a tiny CPU run of every section (the test suite's)")
    parser.add_argument("--quick", action="store_true",
                        help="the paper-scale model and records at reduced epochs and draws: a few minutes on a GPU "
                             "that checks the GPU paths (CUDA graphs, bf16 screening) and their per-epoch rates")
    parser.add_argument("--sections", default=None,
                        help="comma-separated sections to run, in that order (default all, in the order --list "
                             f"shows: {', '.join(SECTION_NAMES)})")
    parser.add_argument("--list", action="store_true", help="print the sections in order and exit")
    parser.add_argument("--out", type=Path, default=None, help="the JSON file to write")
    parser.add_argument("--budget-s", type=float, default=None, help="seconds for the whole check (default 470)")
    args = parser.parse_args(argv)
    unbuffered()
    if args.list:
        print(listing())
        return 0
    if args.out is None:
        parser.error("--out is required")
    try:
        chosen = chosen_sections(args.sections)
    except ValueError as error:
        parser.error(str(error))
    sizes = SMOKE if args.smoke else QUICK if args.quick else GPU
    if args.budget_s is not None:
        sizes = replace(sizes, budget_s=args.budget_s)
    if not args.smoke and not torch.cuda.is_available():
        parser.error("no CUDA device: run with --smoke on a CPU")
    device = torch.device("cpu" if args.smoke else "cuda")
    chosen = tuple(section for section in chosen if section.on_cpu or not args.smoke)
    transformers.logging.set_verbosity_error()
    report = Report(args.out, time.perf_counter(), sizes.budget_s)
    given = " ".join(argv if argv is not None else sys.argv[1:])
    report.document |= {"command": f"PYTHONUNBUFFERED=1 python benchmarks/gpu/check.py {given}",
                        "date": time.strftime("%Y-%m-%d"), "environment": environment(device),
                        "sizes": sizes.__dict__, "section_order": [section.name for section in chosen]}
    report.write()
    workdir = Path(tempfile.mkdtemp(prefix="swagppm-gpu-check-"))
    try:
        config = workload(workdir, sizes, device)
        with swagppm.Session(config) as session:
            context = Context(config=config, session=session, sizes=sizes, report=report, gpu=not args.smoke)
            for section in chosen:
                report.section(section.name, section.budget_s(context), partial(section.run, context))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps({k: v for k, v in report.document.items() if k != "sizes"}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
