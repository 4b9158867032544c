"""What every registered posterior must do, on the tiny model: one dict of entries, every test parametrised over it.

A new posterior joins by registering itself (``swagppm.posteriors.registry``): its
seeded draws reproduce, a secret draw does not (and only the one secret source makes
it), its state round-trips, its parameter view covers exactly the private parameters,
and a fit with it gives a finite ε.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import swagppm
from swagppm import TrialParams
from swagppm.posteriors import registry
from swagppm.posteriors.kinds import KINDS, PosteriorName
from swagppm.train.rng import SeededNoise, secret_noise
from tests.swagppm.helpers import small_config

pytestmark = pytest.mark.fits

HEAD = {"name_or_path": "tiny", "tiny_hidden_size": 32, "tiny_layers": 1, "tiny_vocab_size": 400,
        "trainable": "head", "pooling": "mean"}
ALL = {"name_or_path": "tiny", "tiny_hidden_size": 32, "tiny_layers": 1, "tiny_vocab_size": 400}
# (posterior, model table): every kind on the head; those that cover larger private sets on the whole tiny model too
ENTRIES = [(name, "head") for name in sorted(KINDS)] + [
    (name, "all") for name in sorted(KINDS) if KINDS[name].trainable is None]
POSTERIORS = Path(swagppm.__file__).parent / "posteriors"


def test_every_kind_has_one_registered_fit_and_the_configuration_knows_them_all() -> None:
    import typing

    assert set(registry.load_all()) == set(KINDS) == set(typing.get_args(PosteriorName))


@pytest.fixture(scope="module", params=ENTRIES, ids=[f"{name}-{model}" for name, model in ENTRIES])
def fitted(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
           ) -> Iterator[tuple[swagppm.Session, swagppm.Fit]]:
    name, model = request.param
    config = small_config(tmp_path_factory.mktemp("cache"), model=HEAD if model == "head" else ALL,
                          posterior=name, draws_privacy=16, exact_chains=4, exact_warmup=100, exact_samples=100,
                          exact_min_ess=50.0)
    with swagppm.Session(config) as session:
        yield session, session.fit(TrialParams(c=0.8, ft_epochs=2), progress=False)


def test_a_fit_gives_a_finite_epsilon_and_its_kind_and_prior(fitted: tuple[swagppm.Session, swagppm.Fit]) -> None:
    session, fit = fitted
    result = fit.result
    assert result.failure is None and math.isfinite(result.epsilon) and result.epsilon > 0
    assert fit.posterior is not None and fit.posterior.kind == session.config.posterior == result.posterior
    assert result.prior_scale == session.config.prior_scale and len(result.max_delta) == 16


def test_the_view_covers_exactly_the_private_parameters(fitted: tuple[swagppm.Session, swagppm.Fit]) -> None:
    session, fit = fitted
    assert fit.posterior is not None
    assert fit.posterior.view.names == session.bundle.private_parameters
    assert fit.posterior.view.size == sum(p.numel() for p in session.bundle.model.parameters() if p.requires_grad)
    assert fit.posterior.numbers_per_parameter() >= 1


def test_seeded_draws_reproduce_and_a_secret_draw_does_not(fitted: tuple[swagppm.Session, swagppm.Fit]) -> None:
    _, fit = fitted
    posterior = fit.posterior
    assert posterior is not None

    def seeded(seed: int) -> torch.Tensor:
        return posterior.draw(SeededNoise(torch.Generator().manual_seed(seed)))

    first, again, other = seeded(3), seeded(3), seeded(4)
    assert torch.equal(first, again) and not torch.equal(first, other)
    secret, secret_again = posterior.draw(secret_noise()), posterior.draw(secret_noise())
    assert not torch.equal(secret, secret_again) and secret.shape == first.shape == (posterior.view.size,)
    assert all(not torch.equal(secret, seeded(seed)) for seed in range(8))


def test_the_state_round_trips_to_the_same_seeded_draws(fitted: tuple[swagppm.Session, swagppm.Fit]) -> None:
    _, fit = fitted
    posterior = fit.posterior
    assert posterior is not None
    restored = type(posterior).from_state_dict(posterior.state_dict())
    assert restored.view.names == posterior.view.names and torch.equal(restored.centre, posterior.centre)
    for seed in (0, 1):
        noise = (SeededNoise(torch.Generator().manual_seed(seed)) for _ in range(2))
        assert torch.equal(posterior.draw(next(noise)), restored.draw(next(noise)))


def test_draws_go_into_the_model_and_the_centre_comes_back(fitted: tuple[swagppm.Session, swagppm.Fit]) -> None:
    session, fit = fitted
    posterior, model = fit.posterior, session.bundle.model
    assert posterior is not None
    theta = posterior.draw(SeededNoise(torch.Generator().manual_seed(9)))
    posterior.load_into(model, theta)
    assert torch.equal(posterior.view.read(model), theta.to(posterior.view.read(model).dtype))
    posterior.restore_mean(model)
    torch.testing.assert_close(posterior.view.read(model), posterior.centre.float())


def test_no_posterior_makes_its_own_secret_randomness() -> None:
    """The release noise has one source (``rng.secret_noise``): no posterior module reaches for entropy itself."""
    forbidden = {"secrets", "os.urandom", "secret_noise", "random.SystemRandom"}
    for path in sorted(POSTERIORS.glob("*.py")):
        names = {node.id for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Name)}
        imported = {alias.name for node in ast.walk(ast.parse(path.read_text()))
                    if isinstance(node, ast.Import | ast.ImportFrom) for alias in node.names}
        assert not (names | imported) & forbidden, path.name


def test_draws_together_are_the_draws_one_by_one(fitted: tuple[swagppm.Session, swagppm.Fit]) -> None:
    _, fit = fitted
    posterior = fit.posterior
    assert posterior is not None
    together = posterior.draws(SeededNoise(torch.Generator().manual_seed(5)), 3)
    noise = SeededNoise(torch.Generator().manual_seed(5))
    one_by_one = torch.stack([posterior.draw(noise) for _ in range(3)])
    torch.testing.assert_close(together, one_by_one, rtol=1e-5, atol=1e-6)
