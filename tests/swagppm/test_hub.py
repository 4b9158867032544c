"""A push to the Hub carries exactly the release folder's files under its model card, never the owner report beside
it; the repository name and a token are checked before any work; an existing repository of another visibility or
holding other files is refused (no network here: the plan and the refusals are what is tested)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from huggingface_hub.utils import filter_repo_objects

from swagppm import ConfigError
from swagppm.releases.hub import HubTarget, PushFailed, check_repo, refusal, upload_plan
from swagppm.releases.staging import CARD_FILE, owner_report_path

README = """---
library_name: transformers
pipeline_tag: text-classification
tags:
- text-classification
- differential-privacy
---

# A text classifier released under SWAG-PPM
"""
FILES = ["README.md", CARD_FILE, "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]


@pytest.fixture
def release_folder(tmp_path: Path) -> Path:
    """A committed release as ``release`` leaves it: its files, and the owner report beside the folder."""
    folder = tmp_path / "released"
    folder.mkdir()
    for name in FILES:
        (folder / name).write_text(README if name == "README.md" else json.dumps({"format": "x"}))
    owner_report_path(folder).write_text('{"epsilon": 0.0123}')
    return folder


def test_the_plan_holds_every_file_of_the_folder_and_nothing_else_under_the_readme_s_card(release_folder: Path) -> None:
    plan = upload_plan(release_folder, HubTarget(repo_id="me/model"))
    assert plan.files == tuple(sorted(FILES)) and plan.target.private is True
    assert plan.card.data.pipeline_tag == "text-classification" and plan.card.data.library_name == "transformers"
    assert plan.card.content == README
    beside = [path.name for path in release_folder.parent.iterdir()]
    assert owner_report_path(release_folder).name in beside
    listing = [*FILES, owner_report_path(release_folder).name, "../secret.json", "notes/a.txt", "config.json.bak"]
    assert sorted(filter_repo_objects(listing, allow_patterns=plan.allow_patterns)) == sorted(FILES)


def test_hidden_files_and_subfolders_are_never_in_the_plan(release_folder: Path) -> None:
    (release_folder / ".lock").write_text("")
    (release_folder / "sub").mkdir()
    (release_folder / "sub" / "x.json").write_text("{}")
    assert upload_plan(release_folder, HubTarget(repo_id="me/model")).files == tuple(sorted(FILES))


def test_a_folder_that_is_not_a_committed_release_is_not_pushed(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text(README)
    with pytest.raises(PushFailed, match=f"not a committed release \\(no {CARD_FILE}"):
        upload_plan(tmp_path, HubTarget(repo_id="me/model"))


@pytest.mark.parametrize("repo, named", [("no-owner", "name the owner too"), ("a/b/c", "not a Hub repository name"),
                                         ("me/bad name", "not a Hub repository name")])
def test_a_bad_repository_name_is_one_line_naming_it(repo: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named) as info:
        check_repo(repo, private=True)
    assert repr(repo) in str(info.value) and "\n" not in str(info.value)


def test_no_token_is_refused_before_any_work_and_a_token_gives_a_private_target(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no saved login either
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "hf" / "token"))
    with pytest.raises(ConfigError, match="no Hugging Face token on this machine.*nothing was fitted"):
        check_repo("me/model", private=True)
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    assert check_repo("me/model", private=True) == HubTarget(repo_id="me/model", private=True)
    assert check_repo("me/model", private=False).private is False


def test_an_existing_repository_of_another_visibility_or_with_other_files_is_refused(release_folder: Path) -> None:
    private = upload_plan(release_folder, HubTarget(repo_id="me/model"))
    public = upload_plan(release_folder, HubTarget(repo_id="me/model", private=False))
    assert refusal(private, private=True, files=[".gitattributes"]) is None  # just created
    assert refusal(private, private=True, files=[".gitattributes", *FILES]) is None  # an earlier release
    assert "exists and is public, but the push asked for a private" in str(
        refusal(private, private=False, files=[".gitattributes"]))
    assert "exists and is private, but the push asked for a public" in str(
        refusal(public, private=True, files=[]))
    assert "not a swagppm release (e.g. weights.bin)" in str(
        refusal(private, private=True, files=[".gitattributes", "weights.bin"]))
