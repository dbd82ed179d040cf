"""An OpenAI-compatible server that is not ifsynth's: WireMock (a general HTTP mock server on the JVM)
answering /v1/chat/completions after a fixed delay, for `bench.end_to_end --server wiremock`.

The loopback fake is ifsynth's own; a figure measured only against it could hide a client tuned to its
quirks. WireMock shares no code with either. It is told here, in its own stub-mapping format, how to answer
the InstructIR recipe's four structured outputs: the response_format's schema name picks a stub, whose
text is random words, and whose counts and choices (how many instructions, which scores or labels) are read
from the schema sent with the request. Anything else gets a 400. Requests are counted by WireMock's own
request journal. Install it with `make bench-mock` (npm; it needs a Java runtime).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import REPO
from tests.servers import free_port, wait_until_up

JAR = REPO / "bench" / ".wiremock" / "node_modules" / "wiremock" / "build" / "wiremock-standalone-3.13.2.jar"
WORDS = (
    "{{#each (range 1 9)}}{{#unless @first}} {{/unless}}"
    "{{randomValue length=6 type='ALPHABETIC' lowercase=true}}{{/each}}"
)
TEXT = f'\\"{WORDS}\\"'  # a JSON string inside the JSON string `content`


def _schema(path: str) -> str:
    """Handlebars reading a value from the JSON schema sent with the request."""
    return f"(jsonPath request.body '$.response_format.json_schema.schema.properties.{path}')"


def _field(name: str, value: str) -> str:
    return f'\\"{name}\\": {value}'


# schema name (a regular expression) -> the answer's JSON, as Handlebars written into a JSON string
ANSWERS = {
    "^Instructions.*": "{"
    + _field(
        "instructions",
        f"[{{{{#each (range 1 {_schema('instructions.minItems')})}}}}{{{{#unless @first}}}}, {{{{/unless}}}}"
        f"{TEXT}{{{{/each}}}}]",
    )
    + "}",
    "^Rewrite$": "{" + _field("plan", TEXT) + ", " + _field("revised_passage", TEXT) + "}",
    "^RelevanceJudgement$": "{"
    + _field("explanation", TEXT)
    + ", "
    + _field("score", f"{{{{pickRandom {_schema('score.enum')}}}}} ")
    + "}",
    "^Pick.*": "{"
    + _field("explanation", TEXT)
    + ", "
    + _field("best", f'\\"{{{{pickRandom {_schema("best.enum")}}}}}\\"')
    + "}",
}


def _completion(content: str) -> str:
    return (
        '{"id": "chatcmpl-{{randomValue type=\'UUID\'}}", "object": "chat.completion", '
        '"created": {{now format=\'unix\'}}, "model": "{{jsonPath request.body \'$.model\'}}", '
        '"choices": [{"index": 0, "finish_reason": "stop", "logprobs": null, '
        f'"message": {{"role": "assistant", "content": "{content}"}}}}], '
        '"usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}}'
    )


def mappings(latency: float) -> dict[str, Any]:
    """WireMock stub mappings: one per structured output, answering after ``latency`` seconds."""
    stubs: list[dict[str, Any]] = [
        {
            "request": {
                "method": "POST",
                "urlPath": "/v1/chat/completions",
                "bodyPatterns": [
                    {"matchesJsonPath": {"expression": "$.response_format.json_schema.name", "matches": pattern}}
                ],
            },
            "response": {
                "status": 200,
                "headers": {"Content-Type": "application/json"},
                "body": _completion(answer),
                "fixedDelayMilliseconds": round(latency * 1000),
                "transformers": ["response-template"],
            },
        }
        for pattern, answer in ANSWERS.items()
    ]
    refusal = {"error": {"message": "no answer for this response_format", "type": "invalid_request_error"}}
    stubs.append(
        {
            "priority": 10,
            "request": {"method": "POST", "urlPath": "/v1/chat/completions"},
            "response": {"status": 400, "jsonBody": refusal},
        }
    )
    return {"mappings": stubs}


class WireMock:
    """The running server: its base URL, and the chat requests it has received (from its journal)."""

    def __init__(self, port: int) -> None:
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self._admin = f"http://127.0.0.1:{port}/__admin"

    def requests(self) -> int:
        query = json.dumps({"method": "POST", "url": "/v1/chat/completions"}).encode()
        with urllib.request.urlopen(self._admin + "/requests/count", data=query, timeout=10) as response:
            return int(json.load(response)["count"])


@contextlib.contextmanager
def wiremock_server(latency: float) -> Iterator[WireMock]:
    java = shutil.which("java")
    if java is None or not JAR.exists():
        raise SystemExit("WireMock is not installed: run `make bench-mock` first (it needs npm and a Java runtime)")
    with tempfile.TemporaryDirectory() as root:
        (Path(root) / "mappings").mkdir()
        (Path(root) / "mappings" / "openai.json").write_text(json.dumps(mappings(latency)))
        port = free_port()
        process = subprocess.Popen(
            [java, "-jar", str(JAR), "--port", str(port), "--bind-address", "127.0.0.1", "--root-dir", root,
             "--disable-banner", "--async-response-enabled", "true", "--container-threads", "64"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        server = WireMock(port)
        try:
            wait_until_up(f"http://127.0.0.1:{port}/__admin/health", process, "WireMock", seconds=60)
            yield server
        finally:
            process.terminate()
            process.wait(timeout=30)
