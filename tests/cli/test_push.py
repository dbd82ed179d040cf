"""`ifsynth push` against a loopback stand-in for the Hub: the real huggingface_hub client uploads the export."""

from __future__ import annotations

from pathlib import Path

import pytest
from huggingface_hub import DatasetCard

from tests.conftest import DATA, cli
from tests.fake_hub import FakeHub

TOKEN = "hf_loopback_secret_token"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("push") / "w.duckdb")
    done = cli("--warehouse", path, "import", "instructir", str(DATA / "instructir"), "--name", "orig")
    assert done.returncode == 0, done.stderr
    return path


def hub_env(hub: FakeHub, home: Path, token: str | None = TOKEN) -> dict[str, str]:
    env = {"HF_ENDPOINT": hub.url, "HF_HOME": str(home), "HF_HUB_DISABLE_TELEMETRY": "1", "HF_TOKEN": token or ""}
    return env


def test_push_uploads_the_export_and_a_card_the_hub_library_parses(warehouse: str, tmp_path: Path) -> None:
    with FakeHub(token=TOKEN) as hub:
        done = cli("--warehouse", warehouse, "push", "orig", "--repo", "lab/instructir-regen", "--format", "mteb",
                   "--private", env=hub_env(hub, tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert TOKEN not in done.stdout + done.stderr
    repo = hub.repos["lab/instructir-regen"]
    assert repo.private and repo.commits == ["ifsynth release orig (mteb)"]
    tables = ("corpus", "queries", "instruction", "default")
    assert set(repo.files) == {"README.md", *(f"{name}/test-00000-of-00001.parquet" for name in tables)}
    card = DatasetCard(repo.files["README.md"].decode())
    meta = card.data.to_dict()
    assert meta["task_categories"] == ["text-retrieval"] and meta["license"] == "other"
    assert [c["config_name"] for c in meta["configs"]] == ["corpus", "queries", "instruction", "default"]
    assert "instructir" in meta["tags"] and meta["ifsynth"]["version"]


def test_push_without_a_token_or_with_a_refused_one_is_one_line(warehouse: str, tmp_path: Path) -> None:
    with FakeHub(token=TOKEN) as hub:
        missing = cli("--warehouse", warehouse, "push", "orig", "--repo", "lab/x", env=hub_env(hub, tmp_path, None))
        refused = cli("--warehouse", warehouse, "push", "orig", "--repo", "lab/x", env=hub_env(hub, tmp_path, "hf_no"))
        bad_repo = cli("--warehouse", warehouse, "push", "orig", "--repo", "no-org", env=hub_env(hub, tmp_path))
    for done, message in ((missing, "no Hugging Face token"), (refused, "refused the upload to lab/x: 401"),
                          (bad_repo, "give the dataset repository as ORG/NAME")):  # fmt: skip
        assert done.returncode == 1 and message in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not hub.repos, "nothing was created"


def test_hf_is_one_layout_in_push_and_export_and_the_card_passes_the_hubs_check(warehouse: str, tmp_path: Path) -> None:
    with FakeHub(token=TOKEN) as hub:
        pushed = cli("--warehouse", warehouse, "push", "orig", "--repo", "lab/hf", "--format", "hf",
                     env=hub_env(hub, tmp_path))  # fmt: skip
    exported = cli("--warehouse", warehouse, "export", "orig", "--format", "hf", "--out", str(tmp_path / "hf"))
    assert pushed.returncode == 0 and exported.returncode == 0, pushed.stderr + exported.stderr
    on_disk = {path.relative_to(tmp_path / "hf").as_posix() for path in (tmp_path / "hf").rglob("*") if path.is_file()}
    assert set(hub.repos["lab/hf"].files) == on_disk == {"README.md", "instances.parquet", "corpus.parquet"}
    [checked] = hub.validated  # huggingface_hub has the Hub validate README.md before it commits
    assert checked["license"] == "other" and checked["license_name"] and checked["license_link"]


def test_an_unreachable_hub_is_one_line_naming_it(warehouse: str, tmp_path: Path) -> None:
    with FakeHub(token=TOKEN) as hub:
        gone = hub.url  # the port is closed once the fake has stopped
    done = cli("--warehouse", warehouse, "push", "orig", "--repo", "lab/x", env=hub_env(hub, tmp_path))
    assert done.returncode == 1 and f"the Hub at {gone} cannot be reached" in done.stderr, done.stderr
    assert "nothing was uploaded" in done.stderr and "unexpected" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
