"""Several trials on one GPU: which way of running N training loops at once gives the most steps per second.

A paper-scale trial trains at batch size 8, where one step of an 82M-parameter model is
latency-bound (the GPU draws about 310 W of 700). Ways to run N trials' steps at once,
each timed on the same DistilRoBERTa-shaped model (random weights, bf16 autocast, fused
AdamW, batches of 8 records of 64 tokens), against N single-model steps in turn:

- ``sequential``: the shipped path, one model's step replayed from a CUDA graph
  (``swagppm.train.graphs.GraphedSteps``), N times in turn.
- ``vmap``: one stacked model ([N, ...] parameters) whose forward and backward run under
  ``torch.func.vmap`` over the trials (one kernel launch does N trials' work), eager and
  from a CUDA graph.

Prints and writes model-steps per second for N = 1, 4, 8, 16 (``--smoke``: a tiny model on
the CPU, the eager vmap only). Every record is a full 64 tokens, so no attention mask is
passed (HF's mask builder branches on the mask's values, which ``vmap`` cannot trace).

    python benchmarks/gpu/lockstep.py --out lockstep.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers
from torch.func import functional_call, vmap
from torch.nn import functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the shipped step (swagppm) also where the project is not installed

BATCH, WIDTH, CLASSES = 8, 64, 12


def build(*, smoke: bool, device: torch.device, attention: str = "eager") -> transformers.PreTrainedModel:
    hidden, layers, heads, vocab = (32, 1, 2, 400) if smoke else (768, 6, 12, 50_265)
    config = transformers.RobertaConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                                        num_attention_heads=heads, intermediate_size=4 * hidden,
                                        max_position_embeddings=514, num_labels=CLASSES,
                                        attn_implementation=attention)
    torch.manual_seed(0)
    return transformers.RobertaForSequenceClassification(config).to(device)


def batch(n: int | None, device: torch.device, vocab: int) -> dict[str, torch.Tensor]:
    shape = (BATCH, WIDTH) if n is None else (n, BATCH, WIDTH)
    generator = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(3, vocab, shape, generator=generator).to(device)
    labels = torch.randint(0, CLASSES, shape[:-1], generator=generator).to(device)
    return {"input_ids": ids, "labels": labels,
            "weights": torch.rand(shape[:-1], generator=generator).to(device)}


def autocast(device: torch.device) -> Any:
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda",
                          cache_enabled=False)


def graphed(step: Callable[[], None], optimizer: torch.optim.Optimizer, device: torch.device) -> Callable[[], None]:
    """``step`` (forward, backward, optimiser step) captured once in a CUDA graph and replayed, as
    ``GraphedSteps`` does: warm-up on a side stream, gradients set to None before the capture."""
    side = torch.cuda.Stream(device=device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            step()
    torch.cuda.current_stream(device).wait_stream(side)
    optimizer.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def adamw(params: list[torch.Tensor], device: torch.device) -> torch.optim.Optimizer:
    on_cuda = device.type == "cuda"
    lr = torch.tensor(5e-5, device=device) if on_cuda else 5e-5
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.01, fused=on_cuda, capturable=on_cuda)


def rate(run: Callable[[], None], steps: int, models: int, device: torch.device) -> float:
    """Model-steps per second of ``run`` (which advances ``models`` models ``steps`` steps each)."""
    run()  # warm-up
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    run()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return models * steps / (time.perf_counter() - started)


def sequential(n: int, steps: int, device: torch.device, smoke: bool) -> float:
    """The shipped path: ``GraphedSteps`` (sdpa attention with the padding mask), N models' steps in turn."""
    from swagppm.train.graphs import GraphedSteps

    model = build(smoke=smoke, device=device, attention="sdpa")
    records = 64 * BATCH
    generator = torch.Generator(device="cpu").manual_seed(1)
    inputs = torch.randint(3, model.config.vocab_size, (records, WIDTH), generator=generator).to(device)
    lengths = torch.full((records,), WIDTH, device=device)
    labels = torch.randint(0, CLASSES, (records,), generator=generator).to(device)

    def forward(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, cache_enabled=False):
            return model(input_ids=ids, attention_mask=mask).logits

    params = [p for p in model.parameters() if p.requires_grad]
    graphs = GraphedSteps(forward=forward, parameters=params, optimizer=adamw(params, device), batch_size=BATCH,
                          inputs=inputs, lengths=lengths, labels=labels, widths=[WIDTH])
    rows = torch.arange(BATCH, device=device)

    def run() -> None:
        for _ in range(steps * n):
            graphs.step(rows, WIDTH, None)
    return rate(run, steps, n, device)


def lockstep(n: int, steps: int, device: torch.device, smoke: bool, *, use_graph: bool) -> float:
    model = build(smoke=smoke, device=device)
    stacked = {name: p.detach().unsqueeze(0).repeat(n, *([1] * p.dim())).requires_grad_()
               for name, p in model.named_parameters()}
    buffers = dict(model.named_buffers())
    data = batch(n, device, model.config.vocab_size)
    optimizer = adamw(list(stacked.values()), device)

    def loss_one(params: dict[str, torch.Tensor], ids: torch.Tensor, labels: torch.Tensor,
                 weights: torch.Tensor) -> torch.Tensor:
        logits = functional_call(model, (params, buffers), kwargs={"input_ids": ids}).logits
        return (weights * F.cross_entropy(logits.float(), labels, reduction="none")).mean()

    losses = vmap(loss_one, randomness="different")  # each trial its own dropout

    def step() -> None:
        with autocast(device):
            loss = losses(stacked, data["input_ids"], data["labels"], data["weights"])
        loss.sum().backward()
        optimizer.step()

    def eager() -> None:
        optimizer.zero_grad(set_to_none=True)
        step()

    replay = graphed(step, optimizer, device) if use_graph else eager

    def run() -> None:
        for _ in range(steps):
            replay()
    return rate(run, steps, n, device)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="a tiny model on the CPU, eager variants only")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=None, help="steps per model per timing (default 60; smoke 3)")
    parser.add_argument("--trials", default="1,4,8,16", help="the N to time (default 1,4,8,16)")
    args = parser.parse_args(argv)
    if not args.smoke and not torch.cuda.is_available():
        parser.error("no CUDA device: run with --smoke on a CPU")
    device = torch.device("cpu" if args.smoke else "cuda")
    steps = args.steps or (3 if args.smoke else 60)
    counts = [int(n) for n in args.trials.split(",")]
    variants: dict[str, Callable[[int], float]] = {
        "vmap_eager": lambda n: lockstep(n, steps, device, args.smoke, use_graph=False),
    }
    if device.type == "cuda":
        variants["sequential"] = lambda n: sequential(n, steps, device, args.smoke)
        variants["vmap_graph"] = lambda n: lockstep(n, steps, device, args.smoke, use_graph=True)
    report: dict[str, Any] = {"command": "python benchmarks/gpu/lockstep.py" + (" --smoke" if args.smoke else ""),
                              "torch": torch.__version__, "device": str(device), "batch": BATCH, "width": WIDTH,
                              "steps": steps, "model_steps_per_s": {}}
    if device.type == "cuda":
        report["gpu"] = torch.cuda.get_device_name(device)
    for name, variant in variants.items():
        for n in counts[:1] if name == "sequential" else counts:  # in turn, N models step at one model's rate
            try:
                value: Any = round(variant(n), 1)
            except Exception as error:  # one variant that cannot run must not lose the others
                value = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
                traceback.print_exc(limit=3)
            report["model_steps_per_s"].setdefault(name, {})[n] = value
            print(f"lockstep: {name} N={n}: {value}", file=sys.stderr, flush=True)
            args.out.write_text(json.dumps(report, indent=1) + "\n")
            if device.type == "cuda":
                torch.cuda.empty_cache()
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
