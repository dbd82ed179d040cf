"""An OpenAI-compatible server that is not ifsynth's: Mockoon (a general HTTP mock server, run by Node.js)
answering /v1/chat/completions after a fixed latency, for `bench.end_to_end --server mockoon`.

The loopback fake is ifsynth's own; a figure measured only against it could hide a client tuned to its
quirks. Mockoon shares no code with either. It is told here, in its own environment format, how to answer
the InstructIR recipe's four structured outputs: the response_format's schema name picks an answer, whose
fields are Faker text, and whose counts and choices (how many instructions, which scores or labels) are read
from the schema sent with the request. Anything else gets a 400. Install it with `make bench-mock`.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import REPO

MOCKOON = REPO / "bench" / ".mockoon" / "node_modules" / ".bin" / "mockoon-cli"
SCHEMA = "response_format.json_schema.schema.properties"
SENTENCE = "\\\"{{faker 'lorem.sentence'}}\\\""  # a JSON string inside the JSON string `content`

# schema name (a regular expression) -> the answer's JSON, as Handlebars written into a JSON string
ANSWERS = {
    "^Instructions": (
        f"{{\\\"instructions\\\": [{{{{#repeat (bodyRaw '{SCHEMA}.instructions.minItems') comma=false}}}}"
        f"{{{{#if @index}}}}, {{{{/if}}}}{SENTENCE}{{{{/repeat}}}}]}}"
    ),
    "^Rewrite$": (f'{{\\"plan\\": {SENTENCE}, \\"revised_passage\\": \\"{{{{faker \'lorem.paragraph\'}}}}\\"}}'),
    "^RelevanceJudgement$": (
        f'{{\\"explanation\\": {SENTENCE}, \\"score\\": {{{{oneOf (bodyRaw \'{SCHEMA}.score.enum\')}}}} }}'
    ),
    "^Pick": (f'{{\\"explanation\\": {SENTENCE}, \\"best\\": \\"{{{{oneOf (bodyRaw \'{SCHEMA}.best.enum\')}}}}\\"}}'),
}


def _completion(content: str) -> str:
    return (
        '{"id": "chatcmpl-{{faker \'string.uuid\'}}", "object": "chat.completion", "created": {{now \'t\'}}, '
        '"model": "{{body \'model\'}}", "choices": [{"index": 0, "finish_reason": "stop", "logprobs": null, '
        f'"message": {{"role": "assistant", "content": "{content}"}}}}], '
        '"usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}}'
    )


def _response(body: str, status: int, pattern: str | None) -> dict[str, Any]:
    rules = [{"target": "body", "modifier": "response_format.json_schema.name", "value": pattern,
              "invert": False, "operator": "regex"}] if pattern else []  # fmt: skip
    return {
        "uuid": str(uuid.uuid4()), "body": body, "latency": 0, "statusCode": status, "label": pattern or "",
        "headers": [{"key": "Content-Type", "value": "application/json"}], "bodyType": "INLINE", "filePath": "",
        "databucketID": "", "sendFileAsBody": False, "rules": rules, "rulesOperator": "OR",
        "disableTemplating": False, "fallbackTo404": False, "default": not pattern, "crudKey": "id",
        "callbacks": [],
    }  # fmt: skip


def environment(latency: float) -> dict[str, Any]:
    """A Mockoon environment (format of Mockoon 9) with one route, answering after ``latency`` seconds."""
    refusal = '{"error": {"message": "no answer for this response_format", "type": "invalid_request_error"}}'
    responses = [_response(_completion(answer), 200, pattern) for pattern, answer in ANSWERS.items()]
    route = {
        "uuid": str(uuid.uuid4()), "type": "http", "documentation": "", "method": "post",
        "endpoint": "v1/chat/completions", "responses": [*responses, _response(refusal, 400, None)],
        "responseMode": None, "streamingMode": None, "streamingInterval": 0,
    }  # fmt: skip
    return {
        "uuid": str(uuid.uuid4()), "lastMigration": 33, "name": "openai-chat", "endpointPrefix": "",
        "latency": round(latency * 1000), "port": 3000, "hostname": "127.0.0.1", "folders": [],
        "routes": [route], "rootChildren": [{"type": "route", "uuid": route["uuid"]}], "proxyMode": False,
        "proxyHost": "", "proxyRemovePrefix": False, "tlsOptions": {"enabled": False, "type": "CERT",
        "pfxPath": "", "certPath": "", "keyPath": "", "caPath": "", "passphrase": ""}, "cors": False,
        "headers": [], "proxyReqHeaders": [], "proxyResHeaders": [], "data": [], "callbacks": [],
    }  # fmt: skip


class Mockoon:
    """The running server: its base URL and the chat requests it has answered (counted from its log)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.requests = 0

    def count(self, lines: Iterator[str]) -> None:
        for line in lines:
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if entry.get("message") == "Transaction recorded" and entry.get("requestPath", "").endswith(
                    "/chat/completions"
                ):
                    self.requests += 1

    def settled_requests(self) -> int:
        """The count once the log has stopped growing: its lines trail the answers by a few milliseconds."""
        while True:
            seen = self.requests
            time.sleep(0.3)
            if self.requests == seen:
                return seen


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def mockoon_server(latency: float) -> Iterator[Mockoon]:
    if not MOCKOON.exists():
        raise SystemExit("Mockoon is not installed: run `make bench-mock` first")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "openai.json"
        data.write_text(json.dumps(environment(latency)))
        port = _free_port()
        process = subprocess.Popen(
            [str(MOCKOON), "start", "--data", str(data), "--port", str(port), "--hostname", "127.0.0.1",
             "--disable-log-to-file", "--disable-admin-api"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        server = Mockoon(f"http://127.0.0.1:{port}/v1")
        assert process.stdout is not None
        reader = threading.Thread(target=server.count, args=(process.stdout,), daemon=True)
        reader.start()
        try:
            _wait_until_up(server.base_url, process)
            yield server
        finally:
            process.terminate()
            process.wait(timeout=10)
            reader.join(timeout=10)


def _wait_until_up(base_url: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"Mockoon exited {process.returncode} at start")
        try:
            urllib.request.urlopen(base_url + "/models", timeout=1)  # 404 once it listens
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("Mockoon did not start within 30 s")
