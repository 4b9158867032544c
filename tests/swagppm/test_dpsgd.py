"""DP-SGD with Opacus: ε against Opacus's own accountant, exact per-record clipping, and a session left untouched."""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

import swagppm
from swagppm import TrialParams
from tests.swagppm.helpers import small_config

opacus = pytest.importorskip("opacus", reason="the compare extra (opacus) is not installed")

from opacus.accountants import RDPAccountant  # noqa: E402
from opacus.accountants.utils import get_noise_multiplier  # noqa: E402
from opacus.data_loader import DPDataLoader  # noqa: E402

from swagppm.evaluate import dpsgd  # noqa: E402
from swagppm.evaluate.dpsgd import DPSGDSettings, Plan, dpsgd_fit  # noqa: E402

pytestmark = [pytest.mark.fits,
              pytest.mark.filterwarnings("ignore:Optimal order is the largest alpha")]  # RDP at large ε: loose

# The tiny configuration has 120 training records; these settings give 4 Poisson steps an epoch.
FAST = dict(target_epsilon=4.0, batch_size=32, epochs=2, accountant="rdp")


def rdp_epsilon(sigma: float, sample_rate: float, steps: int, delta: float) -> float:
    """ε of Opacus's RDP accountant, computed independently of the fit."""
    accountant = RDPAccountant()
    accountant.history = [(sigma, sample_rate, steps)]
    return accountant.get_epsilon(delta)


@pytest.fixture
def head_session(tmp_path: Path, local_pretrained: Path) -> Iterator[swagppm.Session]:
    """A head on cached features of the small local BERT (``local_pretrained`` from conftest)."""
    with swagppm.Session(small_config(tmp_path / "cache", model={"name_or_path": str(local_pretrained),
                                                                  "trainable": "head"})) as session:
        yield session


# --- Opacus, torch and transformers ----------------------------------------------------------------------------


def test_opacus_has_the_api_we_rely_on() -> None:
    """Non-wrapping hooks, a seeded noise generator and σ searched at a step count (Opacus 1.6)."""
    from opacus import PrivacyEngine

    make_private = inspect.signature(PrivacyEngine.make_private).parameters
    assert {"wrap_model", "noise_generator", "grad_sample_mode", "poisson_sampling"} <= set(make_private)
    assert "steps" in inspect.signature(get_noise_multiplier).parameters
    assert tuple(int(x) for x in opacus.__version__.split(".")[:2]) >= (1, 6)


# --- the plan and the accountant --------------------------------------------------------------------------------


def test_plan_golden_numbers_and_the_batch_cap() -> None:
    plan = Plan.of(120, DPSGDSettings(**FAST))
    assert (plan.batch_size, plan.sample_rate, plan.steps_per_epoch, plan.delta) == (32, 0.25, 4, 1 / 120)
    assert plan.noise_multiplier == 0.87890625  # golden (Opacus 1.6 RDP search)
    epsilon = rdp_epsilon(plan.noise_multiplier, 0.25, 8, 1 / 120)
    assert 4.0 - 0.01 <= epsilon <= 4.0
    capped = Plan.of(120, DPSGDSettings(target_epsilon=4.0, accountant="rdp", delta=1e-3))  # batch 512 > n
    assert (capped.batch_size, capped.sample_rate, capped.steps_per_epoch, capped.delta) == (120, 1.0, 1, 1e-3)


def test_the_plan_counts_the_steps_opacus_takes() -> None:
    """75 batches an epoch for 3 epochs: Opacus's sampler takes 225 steps, but make_private_with_epsilon's σ is
    searched at int(3 / (1/75)) = 224, and ends above the target; the plan's σ does not."""
    settings = DPSGDSettings(target_epsilon=3.0, batch_size=1, epochs=3, accountant="rdp", delta=1e-5)
    plan = Plan.of(75, settings)
    loader = DPDataLoader(torch.utils.data.TensorDataset(torch.arange(75)), sample_rate=plan.sample_rate)
    assert len(loader) == plan.steps_per_epoch == 75
    taken = settings.epochs * len(loader)
    assert 3.0 - 0.01 <= rdp_epsilon(plan.noise_multiplier, plan.sample_rate, taken, 1e-5) <= 3.0
    theirs = get_noise_multiplier(target_epsilon=3.0, target_delta=1e-5, sample_rate=plan.sample_rate, epochs=3)
    assert theirs == get_noise_multiplier(target_epsilon=3.0, target_delta=1e-5, sample_rate=plan.sample_rate,
                                          steps=224)
    assert rdp_epsilon(theirs, plan.sample_rate, taken, 1e-5) == pytest.approx(3.0017733, abs=1e-6)  # > 3
    assert Plan.of(93, dataclasses.replace(settings, epochs=1)).steps_per_epoch == 92  # int(1 / (1 / 93))


def test_settings_are_checked() -> None:
    for bad in (dict(target_epsilon=0.0), dict(target_epsilon=math.inf), dict(target_epsilon=1.0, delta=1.0),
                dict(target_epsilon=1.0, batch_size=0), dict(target_epsilon=1.0, grad_sample_mode="ew"),
                dict(target_epsilon=1.0, accountant="gdp"), dict(target_epsilon=1.0, max_physical_batch_size=0),
                dict(target_epsilon=1.0, seed=-1)):
        with pytest.raises(swagppm.ConfigError):
            DPSGDSettings(**bad)


def test_auto_mode_and_modules_hooked_twice() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
    assert dpsgd.resolve_mode("auto", model) == "ghost"
    assert dpsgd.resolve_mode("functorch", model) == "functorch"
    model[1].weight = model[0].weight  # tied: ghost clipping cannot handle it
    assert dpsgd.resolve_mode("auto", model) == "hooks"
    twice = nn.Sequential(model[0], nn.Sequential(model[0]))
    with pytest.raises(ValueError, match="reachable by two paths"):
        dpsgd._check_single_paths(twice)


# --- per-record clipping ----------------------------------------------------------------------------------------


def brute_force_clipped_sum(session: swagppm.Session, index: np.ndarray, params: list[nn.Parameter],
                            clip: Callable[[list[float]], float]) -> tuple[list[torch.Tensor], float]:
    """Σ_i clip(g_i), each record's gradient computed alone, and the clipping bound used."""
    grads, norms = [], []
    for i in index:
        inputs, labels, _ = session.train.batch(np.array([i]))
        loss = F.cross_entropy(session.net.logits(inputs, exact=True).float(), labels)
        g = torch.autograd.grad(loss, params)
        grads.append(g)
        norms.append(float(torch.sqrt(sum((x.double() ** 2).sum() for x in g))))
    bound = clip(norms)
    total = [sum(g[k] * min(1.0, bound / (norm + 1e-6)) for g, norm in zip(grads, norms)) for k in range(len(params))]
    return total, bound


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")  # an embedding's integer ids (dpsgd_fit hides it)
@pytest.mark.filterwarnings("ignore:In CPU autocast, but the target dtype")  # functorch on integer ids (likewise)
@pytest.mark.parametrize("model", [{}, {"trainable": "all"}, {"trainable": "last_n_layers", "n_layers": 1},
                                   {"trainable": "lora", "lora_targets": ["query", "value"]}],
                         ids=["tiny", "native-all", "pooled-last-layer", "lora"])
def test_per_record_clipping_is_exact_in_every_mode(tmp_path: Path, local_pretrained: Path, model: dict) -> None:
    """Opacus's clipped sum (σ = 0) equals per-record gradients clipped one by one, in every mode: on tokens the
    tiny pooled model, a native BertForSequenceClassification (position embeddings broadcast over the batch) and
    LoRA adapters; on cached states the pooled top layer (its unused BERT pooler frozen for the fit)."""
    overrides = {"model": {"name_or_path": str(local_pretrained), **model}} if model else {}
    with swagppm.Session(small_config(tmp_path / "cache", **overrides)) as session:
        net, split, bundle = session.net, session.train, session.bundle
        for m in bundle.model.modules():
            if isinstance(m, nn.Dropout):
                m.p = 0.0
        dpsgd.freeze_unused(net, split, bundle.model)
        bundle.model.train(True)
        params = [p for p in bundle.model.parameters() if p.requires_grad]
        index = np.array([0, 3, 5, 17, 40, 41])
        expected, bound = brute_force_clipped_sum(session, index, params, clip=lambda norms: float(np.median(norms)))
        for mode in ("hooks", "ghost", "functorch"):
            settings = DPSGDSettings(target_epsilon=1.0, max_grad_norm=bound, grad_sample_mode=mode, batch_size=6)
            plan = dataclasses.replace(Plan.of(len(split), settings), noise_multiplier=0.0)
            private = dpsgd.make_private(bundle.model, settings=settings, plan=plan, device=session.device)
            expand = dpsgd.BroadcastEmbeddings(bundle.model)
            try:
                dpsgd.backward(net, split, private, index, expand)
                private.optimizer.pre_step()  # clip, add σ = 0 noise, divide by the expected batch size (6)
                for p, want in zip(params, expected):
                    torch.testing.assert_close(p.grad * 6, want, rtol=1e-4, atol=1e-7)
            finally:
                expand.remove()
                dpsgd._remove_opacus(bundle.model, private)


# --- end to end -------------------------------------------------------------------------------------------------


def hooks_on(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks) for m in model.modules())


def test_end_to_end_leaves_the_session_unchanged(tmp_path: Path) -> None:
    with swagppm.Session(small_config(tmp_path / "cache")) as session:
        before = session.fit(TrialParams(c=1.0, ft_epochs=1)).result
        model = session.bundle.model
        state = {k: v.clone() for k, v in model.state_dict().items()}
        flags = [p.requires_grad for p in model.parameters()]
        training, hooks = [m.training for m in model.modules()], hooks_on(model)

        result = dpsgd_fit(session, DPSGDSettings(**FAST))

        assert (result.steps, result.sample_rate, result.expected_batch_size, result.num_train) == (8, 0.25, 30.0, 120)
        assert result.grad_sample_mode == "ghost" and result.accountant == "rdp" and result.delta == 1 / 120
        assert result.epsilon == rdp_epsilon(result.noise_multiplier, 0.25, 8, 1 / 120)  # Opacus's own accountant
        assert 4.0 - 0.01 <= result.epsilon <= 4.0
        assert all(0.0 <= v <= 1.0 for v in (result.f1_macro, result.f1_weighted, result.f1_top_quartile,
                                             result.f1_bottom_quartile))
        assert result.seconds > 0
        json.dumps(result.to_dict())
        for name, value in model.state_dict().items():
            assert torch.equal(value, state[name]), name
        assert [p.requires_grad for p in model.parameters()] == flags
        assert [m.training for m in model.modules()] == training and hooks_on(model) == hooks
        for p in model.parameters():
            assert not any(hasattr(p, name) for name in dpsgd._PARAM_ATTRS)
        for m in model.modules():
            assert not any(name in m.__dict__ for name in dpsgd._MODULE_ATTRS)

        after = session.fit(TrialParams(c=1.0, ft_epochs=1)).result
    assert after.epsilon == before.epsilon and after.max_delta == before.max_delta
    assert after.f1_macro == before.f1_macro


def test_head_mode_with_ghost_clipping_is_reproducible(head_session: swagppm.Session) -> None:
    settings = DPSGDSettings(target_epsilon=8.0, batch_size=32, epochs=10, learning_rate=1e-2, accountant="prv")
    first = dpsgd_fit(head_session, settings)
    assert first.grad_sample_mode == "ghost" and first.steps == 40 and first.accountant == "prv"
    assert 8.0 - 0.02 <= first.epsilon <= 8.0
    second = dpsgd_fit(head_session, settings)
    assert dataclasses.replace(second, seconds=first.seconds) == first
    hooks = dpsgd_fit(head_session, dataclasses.replace(settings, grad_sample_mode="hooks"))
    assert hooks.grad_sample_mode == "hooks" and hooks.epsilon == first.epsilon
    assert hooks.f1_macro == pytest.approx(first.f1_macro, abs=0.05)  # same steps; only float rounding differs


@pytest.mark.parametrize("mode", ["ghost", "hooks"])
def test_empty_poisson_batches_still_take_a_noise_step(head_session: swagppm.Session, mode: str) -> None:
    """An expected batch of one record leaves about a third of the batches empty; every one counts as a step."""
    result = dpsgd_fit(head_session, DPSGDSettings(target_epsilon=8.0, batch_size=1, epochs=1, accountant="rdp",
                                                   grad_sample_mode=mode))
    assert result.steps == 120 and result.sample_rate == 1 / 120
    assert result.epsilon == rdp_epsilon(result.noise_multiplier, 1 / 120, 120, 1 / 120) <= 8.0


def test_physical_batches_change_nothing(head_session: swagppm.Session) -> None:
    settings = DPSGDSettings(target_epsilon=8.0, batch_size=32, epochs=3, learning_rate=1e-2, accountant="rdp")
    whole = dpsgd_fit(head_session, settings)
    split = dpsgd_fit(head_session, dataclasses.replace(settings, max_physical_batch_size=5))
    assert (split.steps, split.epsilon) == (whole.steps, whole.epsilon)
    assert split.f1_macro == pytest.approx(whole.f1_macro, abs=0.05)
