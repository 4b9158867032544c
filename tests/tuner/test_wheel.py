"""A built wheel works without the repository: ``demo`` and ``explain`` from a fresh virtual environment."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tuner.cli.explain import plain

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "swagppm", "scorers", "tuner")


def _run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, f"{command}: {done.stdout[-800:]}{done.stderr[-1500:]}"
    return done.stdout


def _wheel(tmp_path: Path) -> Path:
    """The project's wheel, built from a copy of its sources (the worktree gets no build/ folder)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, source / name)
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp_path / "wheels",
         source, cwd=tmp_path)
    return next((tmp_path / "wheels").glob("swagppm_tuner-*.whl"))


def _venv(tmp_path: Path) -> Path:
    """A fresh environment whose dependencies (torch, optuna, ...) come from this one's site-packages, not the
    project: the project itself is only what the wheel installs."""
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    site = Path(_run(venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                     cwd=tmp_path).strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


@pytest.mark.fits
def test_the_wheel_ships_the_demo_and_the_glossary_and_runs_without_the_repository(tmp_path: Path) -> None:
    wheel, venv = _wheel(tmp_path), _venv(tmp_path)
    _run(venv / "bin" / "python", "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel, cwd=tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    where = _run(venv / "bin" / "python", "-c", "import tuner; print(tuner.__file__)", cwd=outside, env=env)
    assert Path(where.strip()).is_relative_to(venv)  # the installed copy, not the repository
    tool = venv / "bin" / "swagppm-tune"
    assert "--dir" in _run(tool, "demo", "--help", cwd=outside, env=env)
    out = _run(tool, "demo", "--dir", "mine", cwd=outside, env=env)
    written = outside / "mine" / "demo.toml"
    assert written.read_text() == (ROOT / "studies" / "demo.toml").read_text()
    assert "swagppm-tune run mine/demo.toml" in out
    glossary = plain((ROOT / "docs" / "glossary.md").read_text())
    assert _run(tool, "explain", cwd=outside, env=env).strip() == glossary.strip()
