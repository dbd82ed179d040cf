"""A loopback stand-in for the part of the Hugging Face Hub's HTTP API that `ifsynth push` uses.

``huggingface_hub`` takes its endpoint from ``HF_ENDPOINT``, so `create_repo` and `upload_folder` run their
real code against this server: the repository is created, the files are declared (preupload: every file is
sent inline, no LFS), the YAML of the card is validated (the license rule of the Hub's card spec), and the
commit's NDJSON is decoded into ``repos``.
"""

from __future__ import annotations

import base64
import http.server
import json
import threading
from dataclasses import dataclass, field
from typing import Any

import yaml


@dataclass
class Repo:
    private: bool
    files: dict[str, bytes] = field(default_factory=dict)
    commits: list[str] = field(default_factory=list)


class FakeHub:
    """Context manager serving the fake on 127.0.0.1; ``tokens`` seen and ``repos`` created are kept."""

    def __init__(self, *, token: str = "hf_test_token") -> None:
        self.token = token
        self.repos: dict[str, Repo] = {}
        self.authorizations: list[str] = []
        self.validated: list[dict[str, Any]] = []  # the card metadata validate-yaml was asked about
        self._server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeHub:
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                parts = self.path.split("?")[0].strip("/").split("/")
                if parts[:2] == ["api", "validate-yaml"]:  # the Hub answers it without a token
                    return self._validate(json.loads(body)["content"])
                hub.authorizations.append(self.headers.get("Authorization", ""))
                if self.headers.get("Authorization") != f"Bearer {hub.token}":
                    return self._reply(401, {"error": "Invalid credentials in Authorization header"})
                if parts[:3] == ["api", "repos", "create"]:
                    data = json.loads(body)
                    repo_id = f"{data['organization']}/{data['name']}" if data.get("organization") else data["name"]
                    hub.repos.setdefault(repo_id, Repo(private=data.get("visibility") == "private"))
                    return self._reply(200, {"url": f"{hub.url}/datasets/{repo_id}", "name": repo_id})
                if parts[:2] == ["api", "datasets"] and len(parts) >= 6:
                    repo_id, action = "/".join(parts[2:4]), parts[4]
                    if repo_id not in hub.repos:
                        return self._reply(404, {"error": f"Repository {repo_id} not found"})
                    if action == "preupload":
                        files = json.loads(body)["files"]
                        return self._reply(200, {"files": [
                            {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files
                        ]})  # fmt: skip
                    if action == "commit":
                        return self._commit(hub.repos[repo_id], repo_id, body)
                return self._reply(404, {"error": f"no route {self.path}"})

            def _validate(self, content: str) -> None:  # as the library asks it before a commit with README.md
                """The rule of the Hub's card spec the cards must meet: ``license: other`` names its license."""
                meta = yaml.safe_load(content.split("---")[1]) if content.startswith("---") else {}
                hub.validated.append(meta)
                if meta.get("license") == "other" and not (meta.get("license_name") and meta.get("license_link")):
                    message = '"license_name" and "license_link" are required when license is "other"'
                    return self._reply(400, {"errors": [{"message": message}], "warnings": []})
                self._reply(200, {"errors": [], "warnings": []})

            def _commit(self, repo: Repo, repo_id: str, body: bytes) -> None:
                for line in body.splitlines():
                    item = json.loads(line)
                    if item["key"] == "header":
                        repo.commits.append(item["value"]["summary"])
                    elif item["key"] == "file":
                        value = item["value"]
                        repo.files[value["path"]] = base64.b64decode(value["content"])
                oid = f"{len(repo.commits):040x}"
                self._reply(200, {"commitUrl": f"{hub.url}/datasets/{repo_id}/commit/{oid}", "commitOid": oid})

            def _reply(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, name="fake-hub", daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
