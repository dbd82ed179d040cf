"""`ifsynth push`: an export, with its card, to a dataset repository on the Hugging Face Hub.

The upload is ``huggingface_hub``'s own (``create_repo`` + ``upload_folder``), so retries, large files and
the Hub's protocol stay the library's. The token is the library's too (``HF_TOKEN`` or a ``hf auth login``
file): ifsynth neither reads nor prints it. ``HF_ENDPOINT`` points the library at another Hub.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Literal, get_args

from huggingface_hub import HfApi, get_token
from huggingface_hub.errors import HfHubHTTPError

from ifsynth.schemas.errors import PushFailed
from ifsynth.warehouse.export import Format, export
from ifsynth.warehouse.store import Warehouse

PushFormat = Literal["hf", "mteb", "beir"]
PUSH_FORMATS: tuple[PushFormat, ...] = get_args(PushFormat)


def export_format(fmt: PushFormat, recipe: str) -> Format:
    """``hf`` is the Hub's own layout: InF-IR's configs for an InF-IR release, Parquet tables for the others."""
    if fmt != "hf":
        return fmt
    return "hf" if recipe == "infir" else "parquet"


def push(
    warehouse: Warehouse, release: str, recipe: str, repo: str, fmt: PushFormat, *, private: bool, endpoints: bool
) -> tuple[str, int]:
    """Export ``release`` into a temporary folder and upload it as one commit; the commit URL and file count."""
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise PushFailed(f"--repo {repo}: give the dataset repository as ORG/NAME")
    if get_token() is None:  # the Hub would answer 401 to an anonymous upload; say what is missing
        raise PushFailed("no Hugging Face token: set HF_TOKEN (a write token) or run `hf auth login`")
    api = HfApi()
    with tempfile.TemporaryDirectory(prefix="ifsynth-push-") as folder:
        out = Path(folder) / "release"  # the export's manifest goes beside it, inside the temporary folder
        written = export(warehouse, release, export_format(fmt, recipe), out, endpoints=endpoints)
        try:
            api.create_repo(repo, repo_type="dataset", private=private, exist_ok=True)
            commit = api.upload_folder(
                folder_path=out,
                repo_id=repo,
                repo_type="dataset",
                commit_message=f"ifsynth release {release} ({fmt})",
            )
        except HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else "no answer"
            hint = " (check that HF_TOKEN may write to it)" if status in (401, 403) else ""
            raise PushFailed(f"the Hub refused the upload to {repo}: {status}{hint}") from None
    return commit.commit_url, len(written)
