"""On CUDA: the bf16 screen's maximum is the float32 sweep's, a graphed (and compiled) training step is the eager one,
and fits side by side give the ε of each fit alone. Skipped without CUDA (``benchmarks/gpu/check.py`` runs them)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

import swagppm
from swagppm.posteriors.base import ParameterView
from swagppm.posteriors.swag import SWAGPosterior
from swagppm.side_by_side import fit_side_by_side
from swagppm.stage1 import compute_or_load
from swagppm.stage2 import fit
from swagppm.train.engine import Net, Split, adamw, sgd, sweep_draws, train
from swagppm.train.rng import SeededNoise
from tests.swagppm.helpers import small_config

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none is available)")]

CUDA = torch.device("cuda")


def _model(seed: int = 0) -> transformers.RobertaForSequenceClassification:
    """A small RoBERTa classifier without dropout (so that step-by-step comparisons are exact)."""
    config = transformers.RobertaConfig(vocab_size=500, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                        intermediate_size=128, max_position_embeddings=80, num_labels=4,
                                        pad_token_id=1, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(seed)
    return transformers.RobertaForSequenceClassification(config).to(CUDA)


def _split(records: int = 200) -> Split:
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(4, 60, (records,), generator=generator).numpy()
    ids = torch.randint(5, 500, (records, int(lengths.max())), generator=generator)
    for row, length in enumerate(lengths):
        ids[row, length:] = 1
    return Split(ids, np.arange(records) % 4, lengths, CUDA)


@pytest.fixture(autouse=True)
def _float32_matmuls() -> Iterator[None]:
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32 (not TF32) in every comparison here
    yield
    torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.mark.parametrize("compiled", [False, True], ids=["eager-screen", "compiled-screen"])
def test_the_screened_maximum_equals_a_float32_sweep(compiled: bool) -> None:
    model, split = _model().eval(), _split()
    posterior = SWAGPosterior(view=ParameterView.of(model), rank=3, device=CUDA)
    for step in range(3):
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(1e-3 * step * torch.randn_like(parameter))
        posterior.collect(model)
    weights = torch.rand(len(split), generator=torch.Generator(device=CUDA).manual_seed(1), device=CUDA)
    sweeps = {}
    for name, net in (("screened", Net(model, None, device=CUDA, amp=True, compile_eval=compiled)),
                      ("float32", Net(model, None, device=CUDA, amp=False))):
        sweeps[name] = sweep_draws(net, split, posterior, draws=6, weights=weights, batch_size=64,
                                   noise=SeededNoise(torch.Generator(device=CUDA).manual_seed(2)))
    assert sweeps["screened"].confirmed > 0 and sweeps["float32"].confirmed == 0
    # float32 rounding only: a confirmed record is recomputed in a smaller batch than the sweep's
    np.testing.assert_allclose(sweeps["screened"].draw_max, sweeps["float32"].draw_max, rtol=1e-5, atol=0)


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("compiled", [False, True], ids=["graphed", "graphed-compiled"])
def test_a_graphed_step_equals_an_eager_one(compiled: bool, optimizer: str) -> None:
    """Two epochs from one start on the same batches: eager steps against steps replayed from CUDA graphs
    (bucket-padded, and compiled with ``compiled``). SGD (SWAG's) keeps every parameter within float32 rounding;
    AdamW normalises each update, so a rounding-level gradient near 0 moves a weight by up to lr: its losses only."""
    split, results = _split(), {}
    for name, graphs in (("eager", False), ("graphed", True)):
        model = _model()
        net = Net(model, None, device=CUDA, amp=False, graphs=graphs, compile_train=compiled and graphs)
        scheduler = None
        if optimizer == "sgd":
            step: torch.optim.Optimizer = sgd(net, lr=0.05, momentum=0.0)
        else:
            step, scheduler = adamw(net, lr=1e-3, weight_decay=0.01, total_steps=2 * 25)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="CUDA graphs:", category=RuntimeWarning)  # no fallback
            history = train(net, split, stage="check", epochs=2, optimizer=step, scheduler=scheduler,
                            batch_size=8, generator=torch.Generator().manual_seed(0))
        results[name] = ([h.mean_loss for h in history], [p.detach().clone() for p in model.parameters()])
    np.testing.assert_allclose(results["graphed"][0], results["eager"][0], rtol=1e-4 if optimizer == "sgd" else 1e-3)
    if optimizer == "sgd":
        for graphed, eager in zip(results["graphed"][1], results["eager"][1], strict=True):
            torch.testing.assert_close(graphed, eager, rtol=1e-4, atol=1e-6)


def test_fits_side_by_side_give_the_epsilon_of_each_fit_alone(tmp_path: Path) -> None:
    config = small_config(tmp_path / "cache", device="cuda")
    trials = [swagppm.TrialParams(c=0.8, ft_epochs=2), swagppm.TrialParams(c=0.5, ft_epochs=1, seed=3)]
    with swagppm.Resources(config) as resources:
        stage1 = compute_or_load(resources)
        alone = [fit(resources, stage1, params).result for params in trials]
        together = [f.result for f in fit_side_by_side(resources, stage1, trials)]
    for one, other in zip(alone, together, strict=True):
        assert other.failure is None and one.failure is None
        assert other.epsilon == pytest.approx(one.epsilon, rel=1e-6)
        np.testing.assert_allclose(other.max_delta, one.max_delta, rtol=1e-6)
