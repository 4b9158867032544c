"""The worker image's commands run as the Dockerfile writes them, in a fresh virtual environment instead of an image:
its RUN lines install torch, then the project (non-editable, from a copy of what ``COPY`` takes), and the entry point
that ``ENTRYPOINT`` names runs ``launch`` and ``jobs`` from the installed copy."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import PATIENCE
from tests.tuner.helpers import REPO, merged, write_study

pytestmark = pytest.mark.fits  # minutes: every dependency is installed into the new environment

OFFLINE = ("NewConnectionError", "Failed to establish a new connection", "Temporary failure in name resolution",
           "Network is unreachable", "ConnectTimeoutError", "ProxyError")
TORCH_INDEX = " --index-url https://download.pytorch.org/whl/cpu"


def dockerfile() -> tuple[dict[str, str], list[str]]:
    """The Dockerfile's ARG defaults and its RUN commands (continuation lines joined), in order."""
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    arguments = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, flags=re.MULTILINE))
    return arguments, re.findall(r"^RUN (.+)$", text, flags=re.MULTILINE)


def copied_project(folder: Path) -> Path:
    """What ``COPY . /src`` puts in the image: the files .dockerignore allows (an allow-list), no caches."""
    allowed = [line[1:].rstrip("/") for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.startswith("!")]
    for name in allowed:
        source, target = REPO / name, folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(source, target)
    return folder


def run(command: list[str] | str, *, cwd: Path, env: dict[str, str]) -> str:
    """A command's output; a pip that cannot reach a package index skips the test, any other failure fails it."""
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=PATIENCE,
                          shell=isinstance(command, str), executable="/bin/bash" if isinstance(command, str) else None)
    output = done.stdout + done.stderr
    if done.returncode != 0 and any(sign in output for sign in OFFLINE):
        pytest.skip(f"pip cannot install offline here: {next(s for s in OFFLINE if s in output)}")
    assert done.returncode == 0, f"{command}:\n{output[-3000:]}"
    return done.stdout


def test_the_dockerfiles_commands_install_a_working_swagppm_tune_in_a_fresh_environment(tmp_path: Path) -> None:
    """The RUN lines run in bash with ``pip`` being the new environment's, ``/src`` the copy, and the image's
    default VARIANT (cpu). Translated: torch's CPU ``--index-url`` is left out (no internet here: the CPU build comes
    from the local wheel mirror pip is configured with, which the plain pin resolves to), ``PIP_NO_CACHE_DIR`` is not
    set (pip's cache makes a second run quick), and ``useradd`` (root, and this machine's users) is not run."""
    arguments, runs = dockerfile()
    image_python = re.search(r"^FROM python:(\d+\.\d+)", (REPO / "Dockerfile").read_text(), flags=re.MULTILINE)
    assert image_python is not None
    if f"{sys.version_info.major}.{sys.version_info.minor}" != image_python[1]:
        pytest.skip(f"the image's Python is {image_python[1]}, this one {sys.version_info.major}."
                    f"{sys.version_info.minor}")
    torch_run, project_run, user_run = runs
    assert TORCH_INDEX in torch_run and "/src[" in project_run and user_run.startswith("useradd ")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=PATIENCE)
    source = copied_project(tmp_path / "src")
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(VARIANT=arguments["VARIANT"], TORCH_VERSION=arguments["TORCH_VERSION"],
               PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}")
    pip = f'pip() {{ "{venv}/bin/python" -m pip "$@"; }}; '
    run(pip + torch_run.replace(TORCH_INDEX, ""), cwd=tmp_path, env=env)
    run(pip + project_run.replace("/src", str(source)), cwd=tmp_path, env=env)
    assert not source.exists()  # removed as in the image: what runs below is the installed copy

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    tune = str(venv / "bin" / "swagppm-tune")
    assert {"launch", "jobs"} <= set(re.findall(r"^  (\w+) ", run([tune, "--help"], cwd=elsewhere, env=env),
                                                 flags=re.MULTILINE))
    assert "--pause" in run([tune, "jobs", "--help"], cwd=elsewhere, env=env)
    assert "--cluster" in run([tune, "launch", "--help"], cwd=elsewhere, env=env)
    study = write_study(elsewhere / "small.toml", merged())
    assert run([tune, "jobs", str(study)], cwd=elsewhere, env=env).startswith("no jobs were launched for study")
    where = run([str(venv / "bin" / "python"), "-c", "import submitit, torch, tuner; print(tuner.__file__); "
                 "print(torch.__version__)"], cwd=elsewhere, env=env).split()
    assert Path(where[0]).is_relative_to(venv) and where[1].startswith(arguments["TORCH_VERSION"])
