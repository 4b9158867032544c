"""SWAGPPMConfig / DataConfig / ModelConfig: METHOD.md's defaults and study-file parsing."""

import dataclasses
import json
from pathlib import Path

import pytest

import swagppm
from swagppm import DEFAULT_LEARNING_RATES, ConfigError, DataConfig, ModelConfig, SWAGPPMConfig
from tests.swagppm.helpers import error_naming

DEMO_STUDY = Path(__file__).resolve().parents[2] / "studies" / "demo_tiny.toml"


def _study(tmp_path, text, name="study.toml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --- Defaults ------------------------------------------------------------------------------------


def test_paper_defaults():
    config = SWAGPPMConfig()
    assert config.stage1_epochs == 7
    assert config.batch_size == 8
    assert config.swag_epochs == 20
    assert config.swag_rank == 20
    assert config.draws_risk == 500
    assert config.draws_privacy == 500
    assert config.draws_utility == 30
    assert config.finetune_weight_decay == 0.01
    assert config.swag_momentum == 0
    assert config.model.name_or_path == "distilroberta-base"
    assert config.model.trainable == "all"
    assert config.model.resolved_pooling == "native"
    assert config.data == DataConfig()
    assert config.seed == 0


def test_learning_rates_per_trainable_mode():
    assert SWAGPPMConfig().learning_rates == (5e-5, 0.01)
    assert SWAGPPMConfig(model=ModelConfig(trainable="head")).learning_rates == (2e-2, 0.1)
    assert SWAGPPMConfig(model=ModelConfig(trainable="last_n_layers")).learning_rates == (5e-5, 0.01)
    assert SWAGPPMConfig(model=ModelConfig(name_or_path="tiny")).learning_rates == DEFAULT_LEARNING_RATES["tiny"]


def test_explicit_learning_rates_override_defaults():
    assert SWAGPPMConfig(finetune_lr=1e-3, swag_lr=0.5).learning_rates == (1e-3, 0.5)
    assert SWAGPPMConfig(finetune_lr=1e-3).learning_rates == (1e-3, 0.01)
    head = SWAGPPMConfig(model=ModelConfig(trainable="head"), swag_lr=0.3)
    assert head.learning_rates == (2e-2, 0.3)


def test_head_with_native_pooling_is_rejected():
    assert ModelConfig(trainable="head").resolved_pooling == "mean"
    assert ModelConfig(trainable="head", pooling="cls").resolved_pooling == "cls"
    with pytest.raises(ConfigError, match="pooling"):
        ModelConfig(trainable="head", pooling="native")


def test_tiny_heads_zero_is_a_config_error():
    """Regression: tiny_heads=0 used to crash with ZeroDivisionError."""
    with pytest.raises(ConfigError, match="model.tiny_heads"):
        ModelConfig(tiny_heads=0)


def test_configs_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        SWAGPPMConfig().seed = 3  # type: ignore[misc]


# --- from_toml -----------------------------------------------------------------------------------


def test_from_toml_reads_the_three_tables_and_ignores_others(tmp_path):
    path = _study(tmp_path, """
[study]
name = "x"
direction = "maximize"

[search]
c = [0.0, 1.0]
anything = { goes = true }

[data]
source = "synthetic"
synthetic_size = 100
max_per_class = 30
test_size = 0.4

[model]
name_or_path = "prajjwal1/bert-tiny"
trainable = "last_n_layers"
n_layers = 2
pooling = "cls"

[swagppm]
seed = 5
stage1_epochs = 3
swag_epochs = 4
swag_lr = 0.02
swag_modules = ["classifier", "pre_classifier"]
amp = false
""")
    config = SWAGPPMConfig.from_toml(path)
    assert config.data == DataConfig(synthetic_size=100, max_per_class=30, test_size=0.4)
    assert config.model == ModelConfig(name_or_path="prajjwal1/bert-tiny", trainable="last_n_layers", n_layers=2,
                                       pooling="cls")
    assert config.seed == 5
    assert config.stage1_epochs == 3
    assert config.swag_epochs == 4
    assert config.swag_modules == ("classifier", "pre_classifier")
    assert config.amp is False
    assert config.learning_rates == (5e-5, 0.02)
    assert config.swag_rank == 20  # untouched default


def test_from_toml_empty_file_gives_defaults(tmp_path):
    assert SWAGPPMConfig.from_toml(_study(tmp_path, "")) == SWAGPPMConfig()


def test_from_toml_accepts_str_path(tmp_path):
    path = _study(tmp_path, "[swagppm]\nseed = 2\n")
    assert SWAGPPMConfig.from_toml(str(path)).seed == 2


@pytest.mark.parametrize(
    "table, key",
    [("data", "text_colum"), ("model", "trainble"), ("swagppm", "swag_epoch")],
)
def test_unknown_key_names_file_table_and_key(tmp_path, table, key):
    path = _study(tmp_path, f"[{table}]\n{key} = 1\n")
    message = error_naming(ConfigError, path, lambda: SWAGPPMConfig.from_toml(path))
    assert f"[{table}]" in message
    assert key in message
    assert "unknown key" in message


@pytest.mark.parametrize(
    "table, line, key",
    [
        ("swagppm", 'swag_epochs = "20"', "swag_epochs"),
        ("swagppm", "stage1_epochs = true", "stage1_epochs"),
        ("swagppm", "draws_risk = 5.0", "draws_risk"),
        ("swagppm", "swag_modules = [1, 2]", "swag_modules"),
        ("swagppm", 'amp = "yes"', "amp"),
        ("data", 'test_size = "0.5"', "test_size"),
        ("data", "test_size = true", "test_size"),
        ("data", "max_per_class = 2.5", "max_per_class"),
        ("data", "source = 3", "source"),
        ("model", "n_layers = false", "n_layers"),
    ],
)
def test_wrong_type_names_key(tmp_path, table, line, key):
    path = _study(tmp_path, f"[{table}]\n{line}\n")
    message = error_naming(ConfigError, path, lambda: SWAGPPMConfig.from_toml(path))
    assert f"[{table}]" in message
    assert f"{key} = " in message
    assert "wrong type" in message


def test_int_is_accepted_for_a_float(tmp_path):
    path = _study(tmp_path, "[swagppm]\nswag_momentum = 0\nfinetune_weight_decay = 0\nswag_lr = 1\n")
    config = SWAGPPMConfig.from_toml(path)
    assert config.swag_lr == 1
    assert config.finetune_weight_decay == 0


def test_invalid_choice_lists_choices(tmp_path):
    path = _study(tmp_path, '[model]\ntrainable = "some"\n')
    message = error_naming(ConfigError, path, lambda: SWAGPPMConfig.from_toml(path))
    assert "model.trainable = 'some'" in message
    assert "'all', 'head', 'last_n_layers'" in message


@pytest.mark.parametrize(
    "table, line, key",
    [
        ("model", 'pooling = "max"', "model.pooling"),
        ("swagppm", 'swag_dtype = "float16"', "swagppm.swag_dtype"),
        ("swagppm", 'stage2_init = "random"', "swagppm.stage2_init"),
        ("swagppm", 'stage2_step_scale = "mean_weight"', "swagppm.stage2_step_scale"),
        ("swagppm", 'swag_deviations_device = "gpu"', "swagppm.swag_deviations_device"),
    ],
)
def test_other_invalid_choices(tmp_path, table, line, key):
    path = _study(tmp_path, f"[{table}]\n{line}\n")
    with pytest.raises(ConfigError, match=rf"{key} = .*must be one of"):
        SWAGPPMConfig.from_toml(path)


@pytest.mark.parametrize(
    "table, line, key",
    [
        ("data", "test_size = 1.5", "data.test_size"),
        ("data", "min_per_class = 1", "data.min_per_class"),
        ("model", "n_layers = 0", "model.n_layers"),
        ("swagppm", "swag_epochs = 1", "swagppm.swag_epochs"),
        ("swagppm", "draws_privacy = 0", "swagppm.draws_privacy"),
        ("swagppm", "swag_rank = 1", "swagppm.swag_rank"),
        ("swagppm", "batch_size = 0", "swagppm.batch_size"),
        ("swagppm", "reweight_k = 1.5", "swagppm.reweight_k"),
        ("swagppm", "finetune_lr = -1e-5", "swagppm.finetune_lr"),
        ("swagppm", "draws_privacy = 100000000000000000", "swagppm.draws_privacy"),
        ("swagppm", "draws_utility = 100001", "swagppm.draws_utility"),
        ("swagppm", "draws_risk = 1000000", "swagppm.draws_risk"),
        ("swagppm", "stage1_epochs = 5000", "swagppm.stage1_epochs"),
        ("swagppm", "swag_epochs = 1000000", "swagppm.swag_epochs"),
        ("data", "synthetic_size = 1000000000", "data.synthetic_size"),
    ],
)
def test_out_of_range_names_key(tmp_path, table, line, key):
    path = _study(tmp_path, f"[{table}]\n{line}\n")
    message = error_naming(ConfigError, path, lambda: SWAGPPMConfig.from_toml(path))
    assert f"{key} = " in message
    assert "must be" in message


def test_a_bound_says_why(tmp_path):
    path = _study(tmp_path, "[swagppm]\ndraws_privacy = 100000000000000000\n")
    message = error_naming(ConfigError, path, lambda: SWAGPPMConfig.from_toml(path))
    assert "at most 100000" in message and "weeks" in message


@pytest.mark.parametrize("probability, ok", [(1e-300, False), (1e-5, False), (1e-4, True), (0.1, True), (1.0, True),
                                             (0.0, False), (1.5, False)])
def test_the_selection_stop_probability_has_a_floor(probability, ok):
    from swagppm.config import check_stop_probability

    if ok:
        check_stop_probability(probability, "p")
    else:
        with pytest.raises(ConfigError, match="p = "):
            check_stop_probability(probability, "p")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_a_study_file_in_utf16_is_one_error_naming_it(tmp_path, encoding):
    path = tmp_path / "study.toml"
    path.write_bytes("[swagppm]\nseed = 1\n".encode(encoding) if encoding != "utf-16-be"
                     else b"\xfe\xff" + "[swagppm]\nseed = 1\n".encode(encoding))
    with pytest.raises(ConfigError, match="UTF-16 or UTF-32") as info:
        SWAGPPMConfig.from_toml(path)
    assert str(path) in str(info.value)


def test_a_study_file_with_a_utf8_bom_is_read(tmp_path):
    path = tmp_path / "study.toml"
    path.write_bytes(b"\xef\xbb\xbf[swagppm]\nseed = 3\n")
    assert SWAGPPMConfig.from_toml(path).seed == 3


def test_a_study_file_that_is_not_utf8_names_the_byte(tmp_path):
    path = tmp_path / "study.toml"
    path.write_bytes(b"[swagppm]\n# caf\xe9\nseed = 3\n")
    with pytest.raises(ConfigError, match=r"not UTF-8 text \(byte 15\)"):
        SWAGPPMConfig.from_toml(path)


def test_missing_study_file(tmp_path):
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        SWAGPPMConfig.from_toml(path)
    assert str(path) in str(info.value)
    assert "not found" in str(info.value)


def test_invalid_toml(tmp_path):
    path = _study(tmp_path, "[swagppm\nseed = 1\n")
    with pytest.raises(ConfigError) as info:
        SWAGPPMConfig.from_toml(path)
    assert str(path) in str(info.value)
    assert "not valid TOML" in str(info.value)


def test_study_path_is_a_folder(tmp_path):
    """Regression: a folder used to escape as IsADirectoryError."""
    with pytest.raises(ConfigError) as info:
        SWAGPPMConfig.from_toml(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_table_that_is_not_a_table(tmp_path):
    path = _study(tmp_path, 'data = "records.csv"\n')
    with pytest.raises(ConfigError, match=r"\[data\] must be a table"):
        SWAGPPMConfig.from_toml(path)


def test_head_with_native_pooling_rejected_in_study(tmp_path):
    path = _study(tmp_path, '[model]\ntrainable = "head"\npooling = "native"\n')
    with pytest.raises(ConfigError) as info:
        SWAGPPMConfig.from_toml(path)
    assert str(path) in str(info.value)
    assert "pooling" in str(info.value)


def test_relative_source_is_resolved_against_the_study_folder(tmp_path, monkeypatch):
    folder = tmp_path / "studies"
    folder.mkdir()
    (folder / "records.csv").write_text("text,label\na,x\n", encoding="utf-8")
    _study(folder, '[data]\nsource = "records.csv"\n[swagppm]\ncache_dir = "cache"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = SWAGPPMConfig.from_toml(Path("..") / "studies" / "study.toml")
    assert config.data.source == str((folder / "records.csv").resolve())
    assert Path(config.data.source).is_file()
    assert config.cache_dir == str((folder / "cache").resolve())


def test_dot_relative_source_is_resolved_even_if_missing(tmp_path):
    path = _study(tmp_path, '[data]\nsource = "./data/later.jsonl"\n')
    assert SWAGPPMConfig.from_toml(path).data.source == str((tmp_path / "data" / "later.jsonl").resolve())


@pytest.mark.parametrize("source", ["synthetic", "ag_news", "user/some-dataset"])
def test_non_file_sources_are_kept(tmp_path, source):
    path = _study(tmp_path, f'[data]\nsource = "{source}"\n')
    assert SWAGPPMConfig.from_toml(path).data.source == source


def test_absolute_source_is_kept(tmp_path):
    target = tmp_path / "records.csv"
    path = _study(tmp_path, f"[data]\nsource = {json.dumps(str(target))}\n")
    assert SWAGPPMConfig.from_toml(path).data.source == str(target)


def test_demo_study_loads():
    config = SWAGPPMConfig.from_toml(DEMO_STUDY)
    assert config.data.source == "synthetic"
    assert config.data.synthetic_size == 400
    assert config.data.synthetic_classes == 8
    assert config.model.is_tiny
    assert config.model.trainable == "all"
    assert config.stage1_epochs == 7
    assert config.swag_epochs == 10  # half the paper's 20: the demo runs in minutes on a CPU
    assert (config.draws_risk, config.draws_privacy, config.draws_utility) == (200, 200, 30)
    assert config.learning_rates == (DEFAULT_LEARNING_RATES["tiny"][0], 0.01)  # the paper's SWAG learning rate
    assert config.cache_dir is not None and Path(config.cache_dir).is_absolute()
    assert Path(config.cache_dir).parent == DEMO_STUDY.parent


# --- replace / to_dict / from_dict ---------------------------------------------------------------


def test_replace_returns_a_changed_copy():
    base = SWAGPPMConfig()
    changed = base.replace(seed=9, swag_epochs=5)
    assert (changed.seed, changed.swag_epochs) == (9, 5)
    assert (base.seed, base.swag_epochs) == (0, 20)
    assert changed.data == base.data and changed.model == base.model


def test_replace_accepts_dicts_for_data_and_model():
    base = SWAGPPMConfig(data=DataConfig(source="synthetic", synthetic_size=100))
    changed = base.replace(data={"max_per_class": 10}, model={"trainable": "head"})
    assert changed.data == DataConfig(source="synthetic", synthetic_size=100, max_per_class=10)
    assert changed.model.trainable == "head"
    assert changed.model.name_or_path == "distilroberta-base"
    assert changed.learning_rates == (2e-2, 0.1)
    assert base.data.max_per_class is None and base.model.trainable == "all"


def test_replace_accepts_config_objects_and_validates():
    base = SWAGPPMConfig()
    assert base.replace(model=ModelConfig(name_or_path="tiny")).model.is_tiny
    with pytest.raises(ConfigError, match="swagppm.swag_epochs"):
        base.replace(swag_epochs=1)
    with pytest.raises(ConfigError, match="data.test_size"):
        base.replace(data={"test_size": 2.0})


def test_to_dict_round_trips_through_from_dict():
    config = SWAGPPMConfig(
        data=DataConfig(source="/data/records.jsonl", text_column="narrative", max_per_class=50, test_size=0.3),
        model=ModelConfig(trainable="head", pooling="cls"),
        seed=4,
        swag_lr=0.2,
        swag_modules=("classifier",),
        reweight_k=0.5,
        cache_dir="/tmp/cache",
        amp=False,
    )
    values = config.to_dict()
    assert values["data"]["max_per_class"] == 50
    assert values["model"]["trainable"] == "head"
    json.dumps(values)  # plain JSON-ready values
    assert SWAGPPMConfig.from_dict(values) == config
    assert SWAGPPMConfig.from_dict(json.loads(json.dumps(values))) == config
    assert SWAGPPMConfig.from_dict(SWAGPPMConfig().to_dict()) == SWAGPPMConfig()


def test_from_dict_checks_keys_with_where():
    with pytest.raises(ConfigError, match=r"here \[model\]: unknown key\(s\) colour"):
        SWAGPPMConfig.from_dict({"model": {"colour": "red"}}, where="here")
    with pytest.raises(ConfigError, match=r"config \[swagppm\]: seed = '1' has the wrong type"):
        SWAGPPMConfig.from_dict({"seed": "1"})
    with pytest.raises(ConfigError, match=r"\[data\]: expected a table"):
        SWAGPPMConfig.from_dict({"data": ["x"]})


def test_config_error_is_a_value_error_and_public():
    assert issubclass(ConfigError, ValueError)
    for name in ("SWAGPPMConfig", "DataConfig", "ModelConfig", "ConfigError", "DEFAULT_LEARNING_RATES"):
        assert name in swagppm.__all__
