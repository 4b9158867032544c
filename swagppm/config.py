"""Configuration of one SWAG-PPM fit: METHOD.md's defaults as dataclasses.

``SWAGPPMConfig.from_toml`` reads the ``[data]``, ``[model]`` and ``[swagppm]``
tables of a study file; unknown keys and wrong types are reported with the file,
table and key, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import codecs
import dataclasses
import math
import stat
import sys
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from swagppm.errors import ConfigError
from swagppm.posteriors.kinds import KINDS, PosteriorName

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

Trainable = Literal["all", "head", "last_n_layers", "lora"]
Pooling = Literal["auto", "native", "mean", "cls"]
Stage2Init = Literal["base", "stage1"]
AccumulationDtype = Literal["float32", "float64"]
DeviationsDevice = Literal["auto", "same", "cpu"]
StepScale = Literal["none", "largest_weight"]  # swagppm.train.finetune.STEP_SCALES holds what each one does
LaplaceStructure = Literal["auto", "full", "kron"]

TINY_MODEL = "tiny"
SYNTHETIC = "synthetic"  # data.source of the built-in corpus
# Bounds on the work one input may ask for: each draw is a pass over the data and each epoch one over the training
# split, so a value past these runs for weeks (a typo such as 1e17), not a setting anyone means.
MAX_DRAWS = 100_000
MAX_EPOCHS = 1_000
MAX_SYNTHETIC_SIZE = 1_000_000
# Private selection stops after each miss with this probability at least: 1/p candidates are drawn on average.
MAX_EXPECTED_SELECTION_ROUNDS = 10_000
# A release's selection set that is the private test split (reported unaccounted; see swagppm.releases.selection).
PRIVATE_TEST = "private-test"

# Learning rates per trainable mode (METHOD.md, "Which parameters are trained"):
# (fine-tune AdamW lr, SWAG SGD lr). The paper's values are for full fine-tuning of a
# pretrained model; a head on frozen features needs far larger steps, and the tiny
# preset, trained from scratch, sits in between.
DEFAULT_LEARNING_RATES: dict[str, tuple[float, float]] = {
    "all": (5e-5, 0.01),
    "last_n_layers": (5e-5, 0.01),
    "lora": (5e-4, 0.05),
    "head": (2e-2, 0.1),
    TINY_MODEL: (5e-3, 0.02),  # at SWAG lr 0.05 its SGD was chaotic: the risks depended on the thread count
}


def setting(default: Any, *, public: bool, stage1: bool | Literal["cuda"]) -> Any:
    """A configuration field with what it says about itself: ``public`` (whether a release card may publish it: a
    path, a seed, the machine or the declared labels may not) and ``stage1`` (whether it changes stage 1: True,
    False, or ``"cuda"``, only on CUDA). Every field declares both (a test fails otherwise)."""
    return field(default=default, metadata=_metadata(public=public, stage1=stage1))


def _metadata(*, public: bool, stage1: bool | Literal["cuda"]) -> dict[str, object]:
    return {"public": public, "stage1": stage1}


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """Where the records come from and how they are prepared (the paper's options).

    ``source`` is a CSV, JSONL/JSON or Parquet file, a Hugging Face ``datasets``
    name or directory, or ``"synthetic"`` for the built-in offline corpus;
    ``revision`` is a Hub dataset's branch, tag or commit (default: its main branch).
    ``title_column`` optionally names a column with each label's human-readable
    name (OSHA's ``nature_title``): a released model then shows those names.
    ``public`` declares the records public (public-proxy tuning: a study on them costs
    the private data nothing, and the chosen configuration is fitted once on it).

    ``risk_source`` names a file of records the owner declares public, of the same kind
    and columns: stage 1 (the risk model and the non-private baseline) is then fitted
    on them instead of the private records, so each private record's risk depends on
    that record alone (with ``swagppm.risk_range``: the *public risks* a proven bound
    needs). A public set that shares a record with the private data is refused.

    ``labels`` is the *declared label set*: the classes the model outputs, in this
    order, whatever the records hold (a class with few or no records stays an
    output, and no class is dropped); a record whose label is not declared is an
    error. ``labels_file`` names a file of them instead (one label value a line; a
    tab then a readable title optional), read when the study file is. Only a study
    with a declared set may release: a class list derived from the data tells
    whether a record of a rare class was trained on. The synthetic corpus declares
    its own classes. Without a set, classes under ``min_per_class`` are dropped.
    """

    source: str = setting("synthetic", public=False, stage1=False)
    revision: str | None = setting(None, public=False, stage1=False)
    text_column: str = setting("text", public=True, stage1=True)
    label_column: str = setting("label", public=True, stage1=True)
    title_column: str | None = setting(None, public=True, stage1=True)
    split: str = setting("train", public=True, stage1=True)
    max_per_class: int | None = setting(None, public=True, stage1=True)
    min_per_class: int = setting(2, public=True, stage1=True)
    test_size: float = setting(0.5, public=True, stage1=True)
    max_length: int = setting(128, public=True, stage1=True)
    synthetic_size: int = setting(600, public=True, stage1=True)
    synthetic_classes: int = setting(8, public=True, stage1=True)
    public: bool = setting(False, public=True, stage1=True)
    risk_source: str | None = setting(None, public=False, stage1=True)
    labels: tuple[str, ...] | None = setting(None, public=False, stage1=True)
    labels_file: str | None = setting(None, public=False, stage1=False)
    label_titles: tuple[str, ...] | None = setting(None, public=False, stage1=False)

    def __post_init__(self) -> None:
        check_value(self.revision is None or bool(str(self.revision).strip()), "data.revision", self.revision,
                    "a branch, tag or commit of the Hugging Face dataset")
        if self.labels is not None:
            object.__setattr__(self, "labels", tuple(self.labels))
            check_label_set(self.labels, "data.labels")
        if self.label_titles is not None:
            object.__setattr__(self, "label_titles", tuple(self.label_titles))
            check_value(self.labels is not None and len(self.label_titles) == len(self.labels), "data.label_titles",
                        self.label_titles, "one title per declared label (data.labels)")
        check_value(0.0 < self.test_size < 1.0, "data.test_size", self.test_size, "a fraction in (0, 1)")
        check_value(self.min_per_class >= 2, "data.min_per_class", self.min_per_class,
                    "at least 2 (a stratified split needs 2)")
        check_value(self.max_per_class is None or self.max_per_class >= self.min_per_class,
               "data.max_per_class", self.max_per_class, "at least min_per_class")
        check_value(self.max_length >= 8, "data.max_length", self.max_length, "at least 8 tokens")
        check_value(20 <= self.synthetic_size <= MAX_SYNTHETIC_SIZE, "data.synthetic_size", self.synthetic_size,
                    f"between 20 and {MAX_SYNTHETIC_SIZE} (the corpus is generated in memory)")
        check_value(2 <= self.synthetic_classes <= 12, "data.synthetic_classes", self.synthetic_classes,
                    "between 2 and 12")
        check_value(self.synthetic_size >= 2 * self.synthetic_classes, "data.synthetic_size", self.synthetic_size,
                    f"at least twice data.synthetic_classes ({self.synthetic_classes}): every class appears twice")

    @property
    def declared_labels(self) -> tuple[str, ...] | None:
        """The declared label set: ``labels``, or the synthetic corpus's own classes; None when undeclared."""
        if self.labels is not None:
            return self.labels
        if self.source == SYNTHETIC:
            from swagppm.data.synthetic import synthetic_labels  # no torch: the corpus's word lists

            return synthetic_labels(self.synthetic_classes)
        return None


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Which classifier, and which of its parameters the private data may touch.

    ``pooling="native"`` keeps the architecture's own head (the paper's
    distilroberta-base); ``"mean"``/``"cls"`` put a linear head on pooled encoder
    states; ``"auto"`` means ``"mean"`` for ``trainable="head"``, for
    ``"last_n_layers"`` (the frozen lower layers' outputs are then cached, so a trial
    costs only the top layers) and for the tiny preset (it learns much faster than
    with first-token pooling), ``"native"`` otherwise. ``name_or_path="tiny"`` builds a
    small transformer with a tokenizer fitted on the training texts: data-derived,
    for demos and tests only. ``trainable="lora"`` trains low-rank adapters
    (``peft``: rank ``lora_rank``, scale ``lora_alpha``, on ``lora_targets``, by
    default peft's choice for the architecture) and the classifier; the base
    weights stay public and the release merges the drawn adapters into them.
    """

    name_or_path: str = setting("distilroberta-base", public=True, stage1=False)
    trainable: Trainable = setting("all", public=True, stage1=True)
    n_layers: int = setting(1, public=True, stage1=True)
    lora_rank: int = setting(8, public=True, stage1=True)
    lora_alpha: float = setting(16.0, public=True, stage1=True)
    lora_targets: tuple[str, ...] | None = setting(None, public=True, stage1=True)
    pooling: Pooling = setting("auto", public=True, stage1=True)
    tiny_hidden_size: int = setting(64, public=True, stage1=True)
    tiny_layers: int = setting(2, public=True, stage1=True)
    tiny_heads: int = setting(2, public=True, stage1=True)
    tiny_vocab_size: int = setting(2000, public=True, stage1=True)

    def __post_init__(self) -> None:
        check_choice("model.trainable", self.trainable, Trainable)
        check_choice("model.pooling", self.pooling, Pooling)
        check_value(self.n_layers >= 1, "model.n_layers", self.n_layers, "at least 1")
        check_value(self.lora_rank >= 1, "model.lora_rank", self.lora_rank, "at least 1")
        check_value(self.lora_alpha > 0, "model.lora_alpha", self.lora_alpha, "positive")
        if self.lora_targets is not None:
            object.__setattr__(self, "lora_targets", tuple(self.lora_targets))
        check_value(self.tiny_heads >= 1, "model.tiny_heads", self.tiny_heads, "at least 1")
        check_value(self.tiny_hidden_size % self.tiny_heads == 0, "model.tiny_hidden_size", self.tiny_hidden_size,
               f"a multiple of tiny_heads={self.tiny_heads}")
        if self.trainable == "head" and self.resolved_pooling == "native":
            raise ConfigError(
                "model.trainable = 'head' needs a pooled head (model.pooling = 'mean' or 'cls'): "
                "only then can the frozen encoder's outputs be computed once and cached"
            )

    @property
    def is_tiny(self) -> bool:
        return self.name_or_path == TINY_MODEL

    @property
    def resolved_pooling(self) -> str:
        if self.pooling != "auto":
            return self.pooling
        return "mean" if self.trainable in ("head", "last_n_layers") or self.is_tiny else "native"


@dataclass(frozen=True, kw_only=True)
class SWAGPPMConfig:
    """Everything one SWAG-PPM fit needs except the trial's (c, g, epochs).

    Learning rates left as ``None`` take the defaults of the trainable mode
    (``DEFAULT_LEARNING_RATES``). ``device="auto"`` picks CUDA when available.
    ``swag_modules`` restricts SWAG to some submodules; every trainable parameter
    must lie under them (one trained and released undrawn would leak), so it only
    narrows what ``model.trainable`` already limits. On CUDA, ``amp`` runs forward
    passes under bf16 autocast (ε is still confirmed at float32) and ``cuda_graphs``
    replays whole training steps of a token model from CUDA graphs (batches padded to
    16-token buckets); both change results in the last digits only, and neither acts
    on a CPU. ``compile_train`` also runs those captured steps' forward and backward
    passes through ``torch.compile`` (with ``cuda_graphs``), and ``compile_eval`` the
    draws' forward passes (the float32 confirmations stay eager); each compiles once
    per process and model shape (tens of seconds, reused by every trial of a worker),
    and neither acts on a CPU. ``swag_deviations_device = "auto"`` keeps SWAG's deviation matrix
    in pinned host memory when it would take more than half of the device's free
    memory (``"same"``: always on the device, ``"cpu"``: always on the host).

    ``stage2_step_scale`` scales stage 2's AdamW learning rate (see
    ``swagppm.train.finetune.STEP_SCALES``): ``"largest_weight"`` (default)
    multiplies it by the largest privacy weight max_i w_i, ``"none"`` keeps it. Why
    the default: AdamW's step is invariant to a constant factor on the loss, so with
    w_i = c·(1 − f_i) + g unclipped, ``"none"`` trains the same model for every c
    while ε = 2·max w_i·NLL_i shrinks with c. docs/results/audit-vs-c.md (OSHA
    sample, head private): with ``"none"``, c from 0.2 to 0.005 cut ε 40× (0.515 →
    0.013) while the model moved by 2% and the audit's ε lower bound stayed at 1.74,
    refuting every c < 1; with ``"largest_weight"`` the model and the bound follow c
    (1.13, 0.58, 0.39 at c = 0.2, 0.05, 0.005; ε 1.20, 0.60, 0.052), so only the
    smallest c is still refuted. At max w_i = 1 (c + g ≥ 1, the paper's c = 1)
    both are the same.

    ``posterior`` is what stage 2's draws come from (``swagppm.posteriors.kinds``):
    ``"swag"`` (the paper's), ``"laplace"``, ``"exact"`` or ``"sgld"``. The pseudo posterior
    is ξ_w(θ) ∝ π(θ) ∏_i exp(−w_i · min(NLL_i, B)) with the public prior π = N(θ₀,
    ``prior_scale``² I) centred on the private parameters' public initial or pretrained
    values (``prior_scale = inf``: the flat prior of the paper, ``swag`` only) and the
    public bound B = ``nll_bound`` on each record's NLL (None: unbounded). ``risk_range
    = [lo, hi]`` normalises the risks by these public constants, f = clip((r − lo) /
    (hi − lo), 0, 1), rather than by the private minimum and maximum (it needs
    ``[data] risk_source``: together they are the public risks). With ``exact``, a bound B
    and public risks, ε ≤ 2 · clip(c + g, 0, 1) · B is proven before any fit; every other
    combination gives an estimate. ``exact_*`` are the exact sampler's settings (NUTS:
    ``exact_chains`` chains from over-dispersed starts, ``exact_warmup`` adaptation steps,
    ``exact_samples`` kept per chain (None: enough for the privacy and utility draws),
    the gate ``exact_max_rhat`` on split-R̂ and ``exact_min_ess`` on the effective sample
    size, ``exact_release_steps`` of a fresh chain for a release draw (None: the warm-up's
    length)). ``laplace_structure``: the GGN precision in full, Kronecker-factored, or
    ``"auto"`` (full up to ``LAPLACE_FULL_LIMIT`` parameters). ``sgld_lr`` is the Langevin
    step in the preconditioned (whitened) coordinates and ``sgld_burnin_epochs`` the
    epochs before its first snapshot.
    """

    data: DataConfig = field(default_factory=DataConfig, metadata=_metadata(public=True, stage1=True))
    model: ModelConfig = field(default_factory=ModelConfig, metadata=_metadata(public=True, stage1=True))
    seed: int = setting(0, public=False, stage1=True)
    stage1_epochs: int = setting(7, public=True, stage1=True)
    batch_size: int = setting(8, public=True, stage1=True)
    finetune_lr: float | None = setting(None, public=True, stage1=True)
    finetune_weight_decay: float = setting(0.01, public=True, stage1=True)
    swag_epochs: int = setting(20, public=True, stage1=True)
    swag_lr: float | None = setting(None, public=True, stage1=True)
    swag_momentum: float = setting(0.0, public=True, stage1=True)
    swag_rank: int = setting(20, public=True, stage1=True)
    swag_dtype: AccumulationDtype = setting("float32", public=True, stage1=True)
    swag_deviations_device: DeviationsDevice = setting("auto", public=False, stage1="cuda")
    swag_modules: tuple[str, ...] | None = setting(None, public=True, stage1=True)
    draws_risk: int = setting(500, public=True, stage1=True)
    draws_privacy: int = setting(500, public=True, stage1=False)
    draws_utility: int = setting(30, public=True, stage1=False)
    stage2_init: Stage2Init = setting("base", public=True, stage1=False)
    stage2_step_scale: StepScale = setting("largest_weight", public=True, stage1=False)
    reweight_k: float | None = setting(None, public=True, stage1=False)
    posterior: PosteriorName = setting("swag", public=True, stage1=False)
    prior_scale: float = setting(1.0, public=True, stage1=False)
    nll_bound: float | None = setting(None, public=True, stage1=False)
    risk_range: tuple[float, ...] | None = setting(None, public=True, stage1=False)
    exact_chains: int = setting(4, public=True, stage1=False)
    exact_warmup: int = setting(200, public=True, stage1=False)
    exact_samples: int | None = setting(None, public=True, stage1=False)
    exact_max_rhat: float = setting(1.05, public=True, stage1=False)
    exact_min_ess: float = setting(100.0, public=True, stage1=False)
    exact_max_tree_depth: int = setting(8, public=True, stage1=False)
    exact_release_steps: int | None = setting(None, public=True, stage1=False)
    laplace_structure: LaplaceStructure = setting("auto", public=True, stage1=False)
    sgld_lr: float = setting(0.01, public=True, stage1=False)
    sgld_burnin_epochs: int = setting(2, public=True, stage1=False)
    eval_batch_size: int = setting(1024, public=False, stage1="cuda")
    device: str = setting("auto", public=False, stage1=False)
    amp: bool = setting(True, public=False, stage1="cuda")
    cuda_graphs: bool = setting(True, public=False, stage1="cuda")
    compile_eval: bool = setting(True, public=False, stage1="cuda")
    compile_train: bool = setting(True, public=False, stage1="cuda")
    cache_dir: str | None = setting(None, public=False, stage1=False)

    def __post_init__(self) -> None:
        check_value(0 <= self.seed < 2**32, "swagppm.seed", self.seed, "an integer in [0, 2**32)")
        for name in ("stage1_epochs", "batch_size", "draws_risk", "draws_privacy", "draws_utility", "eval_batch_size"):
            check_value(getattr(self, name) >= 1, f"swagppm.{name}", getattr(self, name), "at least 1")
        for name in ("draws_risk", "draws_privacy", "draws_utility"):
            check_value(getattr(self, name) <= MAX_DRAWS, f"swagppm.{name}", getattr(self, name),
                        f"at most {MAX_DRAWS} (each draw is a pass over the data: more would run for weeks)")
        check_value(self.swag_epochs >= 2, "swagppm.swag_epochs", self.swag_epochs,
                    "at least 2 (SWAG needs 2 snapshots)")
        for name in ("stage1_epochs", "swag_epochs"):
            check_value(getattr(self, name) <= MAX_EPOCHS, f"swagppm.{name}", getattr(self, name),
                        f"at most {MAX_EPOCHS} (each epoch is a pass over the training split)")
        check_value(self.swag_rank >= 2, "swagppm.swag_rank", self.swag_rank, "at least 2")
        check_value(self.reweight_k is None or 0.0 < self.reweight_k <= 1.0, "swagppm.reweight_k", self.reweight_k,
                    "in (0, 1]")
        for name in ("finetune_lr", "swag_lr"):
            value = getattr(self, name)
            check_value(value is None or value > 0, f"swagppm.{name}", value, "positive")
        check_choice("swagppm.swag_dtype", self.swag_dtype, AccumulationDtype)
        check_choice("swagppm.swag_deviations_device", self.swag_deviations_device, DeviationsDevice)
        check_choice("swagppm.stage2_init", self.stage2_init, Stage2Init)
        check_choice("swagppm.stage2_step_scale", self.stage2_step_scale, StepScale)
        if self.swag_modules is not None:
            object.__setattr__(self, "swag_modules", tuple(self.swag_modules))
        self._check_posterior()

    def _check_posterior(self) -> None:
        """The posterior's kind, prior, bound, public risks and sampler settings, each named when out of range."""
        check_choice("swagppm.posterior", self.posterior, PosteriorName)
        check_choice("swagppm.laplace_structure", self.laplace_structure, LaplaceStructure)
        kind = KINDS[self.posterior]
        if kind.trainable is not None and self.model.trainable not in kind.trainable:
            raise ConfigError(f"swagppm.posterior = {self.posterior!r} runs on model.trainable = "
                              f"{' or '.join(map(repr, kind.trainable))} (a private set its sampler can cover), not "
                              f"{self.model.trainable!r}; use posterior = 'sgld' or 'swag' for larger private sets")
        check_value(self.prior_scale > 0, "swagppm.prior_scale", self.prior_scale,
                    "positive (the prior's standard deviation; inf for the paper's flat prior)")
        if math.isinf(self.prior_scale) and self.posterior != "swag":
            raise ConfigError(f"swagppm.prior_scale = inf (a flat prior) with posterior = {self.posterior!r}: the "
                              "pseudo posterior is then improper (the softmax is unchanged by a shift common to all "
                              "classes); give a finite prior_scale")
        check_value(self.nll_bound is None or (0 < self.nll_bound and math.isfinite(self.nll_bound)),
                    "swagppm.nll_bound", self.nll_bound, "positive and finite (a bound B on each record's NLL)")
        if self.risk_range is not None:
            object.__setattr__(self, "risk_range", tuple(float(v) for v in self.risk_range))
            check_value(len(self.risk_range) == 2 and 0 <= self.risk_range[0] < self.risk_range[1]
                        and math.isfinite(self.risk_range[1]), "swagppm.risk_range", list(self.risk_range),
                        "[lo, hi] with 0 <= lo < hi, finite (public constants the risks are normalised by)")
        if (self.risk_range is None) != (self.data.risk_source is None):
            given, missing = ("swagppm.risk_range", "data.risk_source") if self.risk_range is not None else \
                ("data.risk_source", "swagppm.risk_range")
            raise ConfigError(f"{given} needs {missing}: public risks need both a stage 1 fitted on records declared "
                              "public and risks normalised by public constants (either alone still reads the "
                              "private records)")
        for name in ("exact_chains", "exact_warmup", "exact_max_tree_depth", "sgld_burnin_epochs"):
            minimum = 0 if name == "sgld_burnin_epochs" else 2 if name == "exact_chains" else 1
            check_value(getattr(self, name) >= minimum, f"swagppm.{name}", getattr(self, name), f"at least {minimum}")
        for name in ("exact_samples", "exact_release_steps"):
            check_value(getattr(self, name) is None or getattr(self, name) >= 1, f"swagppm.{name}",
                        getattr(self, name), "at least 1")
        check_value(self.exact_max_rhat > 1.0, "swagppm.exact_max_rhat", self.exact_max_rhat, "above 1")
        check_value(self.exact_min_ess > 0, "swagppm.exact_min_ess", self.exact_min_ess, "positive")
        check_value(0 < self.sgld_lr <= 1, "swagppm.sgld_lr", self.sgld_lr, "in (0, 1] (a step in whitened units)")
        if self.posterior == "sgld":
            check_value(self.sgld_burnin_epochs < self.swag_epochs - 1, "swagppm.sgld_burnin_epochs",
                        self.sgld_burnin_epochs,
                        f"below swag_epochs - 1 = {self.swag_epochs - 1} (SGLD keeps two snapshots at least)")

    @property
    def public_risks(self) -> bool:
        """Whether the risks come from public information only (a public stage 1, public normalisation)."""
        return self.risk_range is not None and self.data.risk_source is not None

    @property
    def learning_rates(self) -> tuple[float, float]:
        """(fine-tune lr, SWAG lr) after applying the per-mode defaults."""
        key = TINY_MODEL if self.model.is_tiny and self.model.trainable == "all" else self.model.trainable
        ft_default, swag_default = DEFAULT_LEARNING_RATES[key]
        return (self.finetune_lr or ft_default, self.swag_lr or swag_default)

    def replace(self, **changes: Any) -> SWAGPPMConfig:
        """A copy with top-level fields changed (``data=``/``model=`` take dicts too)."""
        for name in ("data", "model"):
            if isinstance(changes.get(name), Mapping):
                changes[name] = dataclasses.replace(getattr(self, name), **changes[name])
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values (for cache keys, exports and release cards)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], *, where: str = "config") -> SWAGPPMConfig:
        """Build from ``{"data": {...}, "model": {...}, **swagppm}`` with checked keys and types."""
        values = dict(values)
        data = config_from_table(DataConfig, values.pop("data", {}), f"{where} [data]")
        model = config_from_table(ModelConfig, values.pop("model", {}), f"{where} [model]")
        return config_from_table(cls, {**values, "data": data, "model": model}, f"{where} [swagppm]")

    @classmethod
    def from_toml(cls, path: str | Path) -> SWAGPPMConfig:
        """Read the ``[data]``, ``[model]`` and ``[swagppm]`` tables of a study file.

        A relative ``data.source``, ``data.risk_source`` or ``swagppm.cache_dir`` is
        resolved against the file's folder, so a study runs the same from any working
        directory.
        """
        path = Path(path)
        document = load_toml(path)
        for table in ("data", "model", "swagppm"):
            if not isinstance(document.get(table, {}), dict):
                raise ConfigError(f"{path}: [{table}] must be a table")
        data = dict(document.get("data", {}))
        for key in ("source", "risk_source"):
            value = data.get(key)
            if isinstance(value, str) and _looks_like_relative_file(value, path.parent):
                data[key] = str((path.parent / value).resolve())
        data |= _declared_from_file(data, path)
        swag = dict(document.get("swagppm", {}))
        if isinstance(swag.get("cache_dir"), str) and not Path(swag["cache_dir"]).expanduser().is_absolute():
            swag["cache_dir"] = str((path.parent / swag["cache_dir"]).resolve())
        return cls.from_dict({**swag, "data": data, "model": document.get("model", {})}, where=str(path))


def _declared_from_file(data: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """``[data] labels_file`` read into ``labels`` (and ``label_titles``), its path resolved against the study file."""
    name = data.get("labels_file")
    if name is None:
        return {}
    where = f"{path} [data] labels_file"
    if not isinstance(name, str):
        raise ConfigError(f"{where} = {name!r} has the wrong type (expected a file name)")
    if data.get("labels") is not None or data.get("label_titles") is not None:
        raise ConfigError(f"{where}: give the declared labels once, in labels_file or in labels, not both")
    file = (path.parent / name).expanduser().resolve()
    labels, titles = read_label_file(file, where=where)
    return {"labels_file": str(file), "labels": labels, "label_titles": titles}


def read_label_file(file: Path, *, where: str) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
    """The declared labels of a file: one label value a line, optionally a tab and its readable title."""
    try:
        check_regular_file(file, f"{where} {file}")
        lines = [line.rstrip("\r") for line in _utf8_text(file.read_bytes(), file, what="the labels file",
                                                          shown=f"{where} {file}").split("\n")]
    except FileNotFoundError:
        raise ConfigError(f"{where} {file}: file not found") from None
    except OSError as error:
        raise ConfigError(f"{where} {file}: cannot be read ({error.strerror or error})") from None
    rows = [line.split("\t", 1) for line in lines if line.strip()]
    labels = tuple(row[0].strip() for row in rows)
    check_label_set(labels, f"{where} {file}")
    if not any(len(row) == 2 for row in rows):
        return labels, None
    return labels, tuple(row[1].strip() if len(row) == 2 and row[1].strip() else row[0].strip() for row in rows)


def check_label_set(labels: tuple[str, ...], where: str) -> None:
    """A declared label set: at least two distinct, non-empty label values written as text."""
    if not all(isinstance(label, str) and label.strip() for label in labels):
        raise ConfigError(f"{where}: every declared label must be a non-empty text (write numbers as \"1\")")
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ConfigError(f"{where}: the label {repeated[0]!r} is declared twice")
    if len(labels) < 2:
        raise ConfigError(f"{where}: declare at least 2 labels (a classifier needs 2 classes)")


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a study file; a missing, unreadable or malformed file is a ``ConfigError`` naming it."""
    path = Path(path)
    try:
        check_regular_file(path, str(path))
        raw = path.read_bytes()
        return tomllib.loads(_utf8_text(raw, path))
    except FileNotFoundError:
        raise ConfigError(f"{path}: study file not found") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    except OSError as error:  # a folder, no permission, ...
        raise ConfigError(f"{path}: cannot read study file: {error}") from None


def _utf8_text(raw: bytes, path: Path, *, what: str = "the study file", shown: str | None = None) -> str:
    """A study file's (or ``what``'s) text: UTF-8, a leading UTF-8 byte-order mark dropped; anything else is named
    (``shown``: how the line names the file, default its path)."""
    shown = str(path) if shown is None else shown
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        raise ConfigError(f"{shown}: {what} is UTF-16 or UTF-32 text (it starts with a byte-order mark); "
                          "save it as UTF-8")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{shown}: {what} is not UTF-8 text (byte {error.start}); save it as UTF-8") from None


def check_regular_file(path: Path, shown: str) -> None:
    """Refuse, before reading, a path that exists but is no regular file: a device (``/dev/zero`` never ends), a FIFO
    (a read waits for a writer forever) or a socket; ``shown`` names it in the line. A missing path passes (the
    reader says it is not found), and so does a folder (the reader says what it expected)."""
    kind = special_file_kind(path)
    if kind is not None:
        raise ConfigError(f"{shown}: is {kind}, not a regular file; name a file")


def special_file_kind(path: Path) -> str | None:
    """What ``path`` is when it exists and is neither a regular file nor a folder (links followed): "a character
    device", "a block device", "a FIFO (named pipe)" or "a socket"; None otherwise (missing, a file, a folder)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    kinds = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), None)


def _looks_like_relative_file(source: str, folder: Path) -> bool:
    candidate = Path(source).expanduser()
    return not candidate.is_absolute() and (source.startswith(".") or (folder / candidate).exists())


def public_settings(config: Any) -> dict[str, Any]:
    """The fields of a configuration dataclass that a card may publish (``setting(public=True)``), tables nested."""
    return _settings(config, lambda declared: bool(declared["public"]))


def stage1_settings(config: Any, *, on_cpu: bool) -> dict[str, Any]:
    """The fields that change stage 1 (on a CPU, not those that act only on CUDA), tables nested."""
    return _settings(config, lambda declared: declared["stage1"] is True or declared["stage1"] == "cuda" and not on_cpu)


def _settings(config: Any, keep: Callable[[Mapping[str, object]], bool]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for declared in dataclasses.fields(config):
        if keep(declared.metadata):
            value = getattr(config, declared.name)
            values[declared.name] = _settings(value, keep) if dataclasses.is_dataclass(value) else (
                list(value) if isinstance(value, tuple) else value)
    return values


def check_value(ok: bool, name: str, value: object, expected: str) -> None:
    """A ``ConfigError`` "name = value: must be expected" unless ``ok``."""
    if not ok:
        raise ConfigError(f"{name} = {value!r}: must be {expected}")


def check_stop_probability(value: float, name: str) -> None:
    """A private selection's stopping probability: in (0, 1], and not so small that its expected candidates (1/p)
    exceed ``MAX_EXPECTED_SELECTION_ROUNDS``."""
    check_value(0 < value <= 1, name, value, "in (0, 1]")
    check_value(1 / value <= MAX_EXPECTED_SELECTION_ROUNDS, name, value,
                f"at least {1 / MAX_EXPECTED_SELECTION_ROUNDS:g}: it asks for {1 / value:.3g} candidate draws on "
                f"average, above the {MAX_EXPECTED_SELECTION_ROUNDS} allowed")


def check_choice(name: str, value: object, literal: object) -> None:
    """A ``ConfigError`` naming the choices of the ``Literal`` type unless ``value`` is one of them."""
    choices = typing.get_args(literal)
    if value not in choices:
        raise ConfigError(f"{name} = {value!r}: must be one of {', '.join(map(repr, choices))}")


def config_from_table(cls: type, values: Mapping[str, Any], where: str) -> Any:
    """Build the dataclass ``cls`` from a TOML table, naming ``where`` and the key in every error.

    Unknown keys and wrong types are errors (a typo never falls back to a default);
    range checks are the dataclass's own ``__post_init__``.
    """
    if not isinstance(values, Mapping):
        raise ConfigError(f"{where}: expected a table, got {values!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known keys: {', '.join(fields)}")
    missing = [name for name, f in fields.items() if name not in values
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"{where}: missing required key(s) {', '.join(missing)}")
    for key, value in values.items():
        if not isinstance(value, (DataConfig, ModelConfig)) and not _type_ok(value, hints[key]):
            raise ConfigError(f"{where}: {key} = {value!r} has the wrong type (expected {_type_name(hints[key])})")
    try:
        return cls(**values)
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from None


def _type_ok(value: object, hint: object) -> bool:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return True  # checked with a better message in __post_init__
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is tuple:
        item = typing.get_args(hint)[0]
        return isinstance(value, (list, tuple)) and all(_type_ok(v, item) for v in value)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint) if isinstance(hint, type) else True


def _type_name(hint: object) -> str:
    return str(hint).replace("typing.", "")
