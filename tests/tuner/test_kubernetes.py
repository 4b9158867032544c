"""The Kubernetes recipe of docs/cli.md runs as written: its manifests parse, and what their pods run (``create``,
then two ``worker``s against the real PostgreSQL, as real processes) finishes the study; the image's Dockerfile
installs torch before the project and takes only the project's files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from optuna.trial import TrialState

from swagppm.config import load_toml
from tests import PATIENCE
from tests.tuner.helpers import FINISHED, REPO, distributed_study, stored
from tuner.storage import STORAGE_ENV

MANIFEST_STUDY = "/study/osha.toml"
SECRET = {"name": "SWAGPPM_TUNE_STORAGE", "valueFrom": {"secretKeyRef": {"name": "swagppm-db", "key": "url"}}}
OWNER = [{"name": "SWAGPPM_TUNE_KEY_FILE", "value": "/keys/owner.key"},  # the owner key, from a Secret volume
         {"name": "SWAGPPM_TUNE_LEDGER", "value": "/study/ledger"}]  # one ledger for every pod


def manifests() -> dict[str, dict[str, Any]]:
    """The Jobs of docs/cli.md's Kubernetes section, by name, parsed by a YAML parser."""
    text = (REPO / "docs" / "cli.md").read_text()
    section = text.split("### Kubernetes", 1)[1].split("\n## ", 1)[0]
    jobs = [document for block in re.findall(r"```yaml\n(.*?)```", section, flags=re.DOTALL)
            for document in yaml.safe_load_all(block)]
    return {job["metadata"]["name"]: job for job in jobs}


def container(job: dict[str, Any]) -> dict[str, Any]:
    (only,) = job["spec"]["template"]["spec"]["containers"]
    return only


def pod_commands() -> list[list[str]]:
    """What the pods run, in order: the create Job's command, then each worker's (``completions`` of them)."""
    jobs = manifests()
    create, workers = jobs["swagppm-osha-create"], jobs["swagppm-osha-workers"]
    return [container(create)["command"]] + [container(workers)["command"]] * workers["spec"]["completions"]


def test_the_manifests_parse_and_run_create_then_workers_with_the_storage_from_a_secret() -> None:
    jobs = manifests()
    assert sorted(jobs) == ["swagppm-osha-create", "swagppm-osha-workers"]
    for job in jobs.values():
        assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
        spec = job["spec"]["template"]["spec"]
        assert spec["restartPolicy"] == "OnFailure" and spec["securityContext"]["runAsUser"] == 1000
        assert container(job)["env"] == [SECRET, *OWNER]  # the URL and the key from Secrets, never in the manifest
        assert {"name": "keys", "secret": {"secretName": "swagppm-owner-key", "defaultMode": 0o440}} in spec["volumes"]
        assert container(job)["image"].startswith("registry.internal/swagppm-tuner:")
    assert container(jobs["swagppm-osha-create"])["command"] == ["swagppm-tune", "create", MANIFEST_STUDY]
    workers = jobs["swagppm-osha-workers"]
    assert container(workers)["command"] == ["swagppm-tune", "worker", MANIFEST_STUDY]
    assert workers["spec"]["parallelism"] == workers["spec"]["completions"] == 4
    mounts = {mount["name"]: mount["mountPath"] for mount in container(workers)["volumeMounts"]}
    assert mounts == {"study": "/study", "cache": "/cache", "keys": "/keys"}


def test_the_console_script_is_the_module_the_test_runs() -> None:
    """``swagppm-tune`` in the manifests is ``python -m tuner.cli`` here (the same ``main``)."""
    assert 'swagppm-tune = "tuner.cli:main"' in (REPO / "pyproject.toml").read_text()


@pytest.mark.services
def test_the_pods_commands_one_by_one_finish_the_study(postgres: str, tmp_path: Path, cleanup: list[Path]) -> None:
    """``create`` (the first Job), then two ``worker`` pods at once, as real processes on the real PostgreSQL."""
    path = distributed_study(tmp_path, tmp_path / "cache", postgres, study={"n_trials": 3, "grace_period": 30})
    cleanup.append(path)
    commands = [[sys.executable, "-m", "tuner.cli", *command[1:]] for command in pod_commands()]
    commands = [[str(path) if word == MANIFEST_STUDY else word for word in command] for command in commands]
    create, workers = commands[0], commands[1:3]  # two of the Job's four pods are enough to share the study
    env = {**os.environ, STORAGE_ENV: postgres}  # what the Secret puts in each pod's environment
    made = subprocess.run(create, capture_output=True, text=True, cwd=REPO, env=env, timeout=PATIENCE)
    assert made.returncode == 0, made.stdout + made.stderr
    assert "0 finished trial(s), 2 waiting; workers join it with" in made.stdout  # the start point and the probe
    again = subprocess.run(create, capture_output=True, text=True, cwd=REPO, env=env, timeout=PATIENCE)
    assert again.returncode == 0 and "2 waiting" in again.stdout  # a pod restarted: nothing added
    pods = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                             env=env) for command in workers]
    outputs = [pod.communicate(timeout=PATIENCE)[0] for pod in pods]
    assert [pod.returncode for pod in pods] == [0, 0], outputs
    assert sum(out.count("stage 1 computed") for out in outputs) == 1  # once per study, read by the other
    study = stored(path)
    trials = study.get_trials()
    assert all(t.state in FINISHED for t in trials) and len(trials) >= 3
    points = [(t.params["c"], t.params["ft_epochs"]) for t in trials]
    assert points.count((1.0, 6)) == 1 and len(set(points)) == len(points)  # the start point once, no duplicates
    assert not study.get_trials(states=(TrialState.WAITING,))
    assert study.user_attrs["claim"]["terms"]["accounting"] is None and "definition" in study.user_attrs  # open_study


def test_the_dockerfile_installs_torch_first_and_the_image_takes_only_the_project() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    readme = (REPO / "README.md").read_text()
    pinned = re.search(r"pip install torch==([0-9.]+)", readme)
    assert pinned and f"ARG TORCH_VERSION={pinned[1]}" in dockerfile  # the README's torch
    torch_line = dockerfile.index('pip install "torch==${TORCH_VERSION}"')
    project_line = dockerfile.index('pip install "/src[postgres,mysql,redis,grpc,tracking,cluster,s3,gcs]"')
    assert torch_line < project_line
    assert "cpu) pip install" in dockerfile and "cuda) pip install" in dockerfile and "ARG VARIANT=cpu" in dockerfile
    assert "USER 1000" in dockerfile and 'ENTRYPOINT ["swagppm-tune"]' in dockerfile
    ignored = [line for line in (REPO / ".dockerignore").read_text().splitlines() if line and line[0] != "#"]
    assert ignored[0] == "*"  # an allow-list: no data, cache, database or release can enter the image
    allowed = {line[1:].rstrip("/") for line in ignored if line.startswith("!")}
    project = load_toml(REPO / "pyproject.toml")
    packages = {name.rstrip("*") for name in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    # what the package is built from (its metadata's files and packages) and the glossary tuner/glossary.md links to
    assert allowed == {"pyproject.toml", project["project"]["readme"], "LICENSE", *packages, "docs/glossary.md"}
