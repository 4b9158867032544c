"""Pushing a committed release folder to the Hugging Face Hub: exactly its files, under its model card.

``check_repo`` reads the repository's name and whether a token is there, before any
fit (no network). ``upload_plan`` is what a push carries: the repository, its
visibility (private unless asked otherwise), the release folder's files, and the
``huggingface_hub.ModelCard`` its ``README.md`` is; never the owner-only report (it
lies beside the folder) nor any other file. ``push`` creates the repository and
uploads the plan's files in one commit (``HfApi.create_repo`` and ``upload_folder``
with the plan's names as ``allow_patterns``). An existing repository is refused when
its visibility is not the one asked for (``create_repo`` keeps an existing
repository's visibility: a private push must never land in a public one) or when it
holds files that are not an earlier release; an earlier release is replaced as a
whole (the Hub's history keeps it). Nothing here imports torch.
"""

from __future__ import annotations

import glob
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swagppm.errors import ConfigError
from swagppm.releases.staging import CARD_FILE

README = "README.md"
KEPT = ".gitattributes"  # every Hub repository has one; the Hub keeps it through a deletion


class PushFailed(RuntimeError):
    """The release folder is in place, but pushing it to the Hub failed or was refused (one line)."""


@dataclass(frozen=True, kw_only=True)
class HubTarget:
    """Where a release is pushed: ``repo_id`` ("owner/name") and whether the repository is private."""

    repo_id: str
    private: bool = True


@dataclass(frozen=True, kw_only=True)
class UploadPlan:
    """What one push carries: the release folder's file names (every one, nothing else) and its card."""

    target: HubTarget
    folder: Path
    files: tuple[str, ...]
    card: Any  # huggingface_hub.ModelCard

    @property
    def allow_patterns(self) -> list[str]:
        """The file names as ``upload_folder`` patterns (fnmatch), each matching only itself."""
        return [glob.escape(name) for name in self.files]


def check_repo(repo_id: str, *, private: bool) -> HubTarget:
    """A valid repository name and a Hugging Face token on this machine, or one ``ConfigError`` line (no network)."""
    from huggingface_hub import get_token
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise ConfigError(f"--push-to-hub {repo_id!r}: not a Hub repository name "
                          f"({str(error).splitlines()[0]})") from None
    if "/" not in repo_id:
        raise ConfigError(f"--push-to-hub {repo_id!r}: name the owner too (OWNER/NAME)")
    if get_token() is None:
        raise ConfigError(f"--push-to-hub {repo_id}: no Hugging Face token on this machine (run `hf auth login` or "
                          "set HF_TOKEN); nothing was fitted")
    return HubTarget(repo_id=repo_id, private=private)


def upload_plan(folder: Path, target: HubTarget) -> UploadPlan:
    """Every file of the committed release ``folder`` (none hidden, no subfolder) and the card its README is."""
    from huggingface_hub import ModelCard

    files = tuple(sorted(path.name for path in folder.iterdir() if path.is_file() and not path.name.startswith(".")))
    if CARD_FILE not in files or README not in files:
        raise PushFailed(f"{folder} is not a committed release (no {CARD_FILE} or {README}); nothing was pushed")
    return UploadPlan(target=target, folder=folder, files=files, card=ModelCard((folder / README).read_text()))


def refusal(plan: UploadPlan, *, private: bool | None, files: Sequence[str]) -> str | None:
    """Why an existing repository (its visibility and files) must not receive ``plan``, or None."""
    repo = plan.target.repo_id
    if private is not None and private != plan.target.private:
        asked = "private" if plan.target.private else "public (--public-repo)"
        return (f"{repo} exists and is {'private' if private else 'public'}, but the push asked for a {asked} "
                "repository; change its visibility on the Hub or push to a new repository")
    others = [name for name in files if name != KEPT]
    if others and CARD_FILE not in others:
        return (f"{repo} holds files that are not a swagppm release (e.g. {others[0]}); push to a new repository "
                "(a push replaces only an earlier release)")
    return None


def push(plan: UploadPlan) -> str:
    """Create the repository (private unless the plan says public) and upload exactly the plan's files as one commit,
    replacing an earlier release there; returns the repository's URL. Any failure is one ``PushFailed`` line."""
    from huggingface_hub import HfApi

    api, repo = HfApi(), plan.target.repo_id
    try:
        url = api.create_repo(repo, private=plan.target.private, exist_ok=True)
        existing = api.list_repo_files(repo)
        reason = refusal(plan, private=api.repo_info(repo).private, files=existing)
        if reason is not None:
            raise PushFailed(reason)
        api.upload_folder(repo_id=repo, folder_path=plan.folder, allow_patterns=plan.allow_patterns,
                          delete_patterns=["*"] if set(existing) - {KEPT} else None,
                          commit_message="A SWAG-PPM release (swagppm-tune release --push-to-hub)")
    except PushFailed:
        raise
    except Exception as error:  # noqa: BLE001 - offline, no permission, a network or Hub error: one line for each
        raise PushFailed(f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else 'no detail'}") \
            from None
    return str(url)
