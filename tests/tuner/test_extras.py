"""Optional packages are checked before any work: a verb without its extra refuses at once, in one line that names
the install (``tuner.extras``), and nothing is fitted, made or written meanwhile."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from swagppm import ConfigError, TrialParams
from tests.tuner.helpers import one_error_line, with_a_feasible_trial
from tuner.cli import main
from tuner.extras import EXTRAS, missing, require, require_storage_driver

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[2]


def hide(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make ``modules`` uninstalled for this test: an import of them fails, ``find_spec`` finds nothing."""
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


def test_every_extra_named_here_is_one_pyproject_declares_with_its_package() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra, modules in EXTRAS.items():
        packages = " ".join(declared[extra]).lower()
        assert all(module in packages for module in modules), (extra, modules, packages)


def test_a_missing_extra_is_one_line_naming_its_install(monkeypatch: pytest.MonkeyPatch) -> None:
    require("compare", needed_by="compare")  # installed here: nothing to say
    hide(monkeypatch, "opacus")
    assert missing("compare") == ["opacus"]
    with pytest.raises(ConfigError) as refused:
        require("compare", needed_by="compare")
    assert str(refused.value) == "compare needs opacus, which is not installed: pip install 'swagppm-tuner[compare]'"


@pytest.mark.parametrize("url, module, extra", [
    ("postgresql://u:secret@db.example:5432/s", "psycopg", "postgres"),
    ("postgres://u@db.example/s", "psycopg", "postgres"),
    ("postgresql+psycopg://u@db.example/s", "psycopg", "postgres"),
    ("mysql://root@127.0.0.1/s", "pymysql", "mysql"),
    ("mariadb://root@127.0.0.1/s", "pymysql", "mysql"),
    ("redis://127.0.0.1:6379/0", "redis", "redis"),
])
def test_a_server_storage_needs_its_driver(monkeypatch: pytest.MonkeyPatch, url: str, module: str,
                                           extra: str) -> None:
    require_storage_driver(url, shown="the-url")
    hide(monkeypatch, module)
    with pytest.raises(ConfigError, match=rf"^the study storage the-url needs {module}, which is not installed: "
                                          rf"pip install 'swagppm-tuner\[{extra}\]'$"):
        require_storage_driver(url, shown="the-url")


def test_sqlite_journals_and_drivers_the_user_names_need_no_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    hide(monkeypatch, "psycopg", "pymysql", "redis")
    for url in ("sqlite:///s.db", "journal:s.log", "postgresql+psycopg2://u@h/s", "mysql+mysqldb://u@h/s"):
        require_storage_driver(url, shown=url)


def test_compare_without_opacus_refuses_before_any_fit_or_folder(
        study_file: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    with_a_feasible_trial(path)  # a study with a chosen trial: compare would fit it at once
    before = sorted(tmp_path.iterdir())
    hide(monkeypatch, "opacus")
    assert main(["compare", str(path), "-o", str(tmp_path / "comparison")]) == 2
    assert one_error_line(capsys.readouterr().err) == (
        "swagppm-tune: error: compare (its DP-SGD side, through Opacus) needs opacus, which is not installed: "
        "pip install 'swagppm-tuner[compare]'")
    assert sorted(tmp_path.iterdir()) == before  # no cache (no fit), no -o folder


def test_the_library_s_compare_refuses_before_any_fit(study_file: Callable[..., Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from tuner import StudyConfig
    from tuner.compare import CompareSettings, compare

    hide(monkeypatch, "opacus")
    with pytest.raises(ConfigError, match=r"pip install 'swagppm-tuner\[compare\]'"):
        compare(StudyConfig.from_toml(study_file()).fit, CompareSettings(params=TrialParams(c=1.0, ft_epochs=1)))
    assert not (tmp_path / "cache").exists()


def test_launch_without_submitit_refuses_before_the_study_is_made(
        study_file: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file(study={"storage": "postgresql://postgres@127.0.0.1:5432/test"})
    hide(monkeypatch, "submitit")
    assert main(["launch", str(path), "--jobs", "1", "--cluster", "local"]) == 2
    assert one_error_line(capsys.readouterr().err) == (
        "swagppm-tune: error: launch (it submits the jobs through submitit) needs submitit, which is not installed: "
        "pip install 'swagppm-tuner[cluster]'")
    assert sorted(tmp_path.iterdir()) == [path]  # no artifacts folder, no study


@pytest.mark.parametrize("verb", [["status"], ["run"], ["worker"], ["report", "-o", "REPORT"],
                                  ["export", "-o", "EXPORT"]])
def test_a_verb_on_a_server_study_without_its_driver_refuses_before_any_work(
        study_file: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], verb: list[str]) -> None:
    path = study_file()
    hide(monkeypatch, "psycopg")
    places = {"REPORT": str(tmp_path / "r.html"), "EXPORT": str(tmp_path / "e.json")}
    argv = [verb[0], str(path), *(places.get(arg, arg) for arg in verb[1:]),
            "--storage", "postgresql://postgres:hunter2@127.0.0.1:5432/test"]
    assert main(argv) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line == ("swagppm-tune: error: the study storage postgresql://postgres:***@127.0.0.1:5432/test needs "
                    "psycopg, which is not installed: pip install 'swagppm-tuner[postgres]'")
    assert sorted(tmp_path.iterdir()) == [path]  # no artifacts folder, no cache, no output
