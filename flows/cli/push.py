"""`ifsynth push`: an export, with its card, to a dataset repository on the Hugging Face Hub.

The upload is ``huggingface_hub``'s own (``create_repo`` + ``upload_folder``), so retries, large files and
the Hub's protocol stay the library's. The token is the library's too (``HF_TOKEN`` or a ``hf auth login``
file): ifsynth neither reads nor prints it. ``HF_ENDPOINT`` points the library at another Hub.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Literal, get_args

import httpx2
from huggingface_hub import HfApi, constants, get_token
from huggingface_hub.errors import HfHubHTTPError

from ifsynth.flows.run.exports import export
from ifsynth.schemas.errors import PushFailed
from ifsynth.warehouse.store import Warehouse

PushFormat = Literal["hf", "mteb", "beir"]
PUSH_FORMATS: tuple[PushFormat, ...] = get_args(PushFormat)


def push(
    warehouse: Warehouse, release: str, repo: str, fmt: PushFormat, *, private: bool, endpoints: bool
) -> tuple[str, int]:
    """Export ``release`` into a temporary folder and upload it as one commit; the commit URL and file count."""
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise PushFailed(f"--repo {repo}: give the dataset repository as ORG/NAME")
    if get_token() is None:  # the Hub would answer 401 to an anonymous upload; say what is missing
        raise PushFailed("no Hugging Face token: set HF_TOKEN (a write token) or run `hf auth login`")
    api = HfApi()
    with tempfile.TemporaryDirectory(prefix="ifsynth-push-") as folder:
        out = Path(folder) / "release"  # the export's manifest goes beside it, inside the temporary folder
        written = export(warehouse, release, fmt, out, endpoints=endpoints).files
        endpoint = constants.ENDPOINT
        try:
            api.create_repo(repo, repo_type="dataset", private=private, exist_ok=True)
            commit = api.upload_folder(
                folder_path=out,
                repo_id=repo,
                repo_type="dataset",
                commit_message=f"ifsynth release {release} ({fmt})",
            )
        except ValueError as exc:  # the library has the Hub validate README.md's metadata before the upload
            raise PushFailed(f"the Hub at {endpoint} rejects the card of {release}: {exc}".replace("\n", " ")) from None
        except HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else "no answer"
            hint = " (check that HF_TOKEN may write to it)" if status in (401, 403) else ""
            raise PushFailed(f"the Hub at {endpoint} refused the upload to {repo}: {status}{hint}") from None
        except httpx2.HTTPError as exc:  # no answer at all: the network, a proxy, or HF_ENDPOINT
            said = str(exc) or type(exc).__name__
            raise PushFailed(
                f"the Hub at {endpoint} cannot be reached ({said}): check the network or HF_ENDPOINT, "
                "then push again; nothing was uploaded"
            ) from None
    return commit.commit_url, len(written)
