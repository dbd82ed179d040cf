"""An endpoint's request body, built without a network: the cache key is its hash, so what each
structured-output style puts in it (and what it leaves alone) is pinned here; and the base URL as keyed."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import certifi
import httpx2
import pytest

from ifsynth.flows.llm.answers import decode_completion
from ifsynth.flows.llm.route import Route, public_url, tls
from ifsynth.schemas.answers import RelevanceJudgement, strict_schema
from ifsynth.schemas.config import Endpoint, StructuredOutput
from tests.fake_openai import FakeOpenAI
from tests.helpers import ask

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "judge this"}]


def body(style: StructuredOutput, messages: list[dict[str, str]] | None = None, **changes: Any) -> dict:
    route = Route(Endpoint(base_url="http://localhost:8000/v1", structured_output=style))
    given = [dict(m) for m in MESSAGES] if messages is None else messages
    return route.body(dataclasses.replace(ask(), **changes), "m", 7, given)


def test_every_style_sends_the_same_sampling_fields() -> None:
    for style in ("json_schema", "json_object", "none"):
        sent = body(style)
        assert {k: sent[k] for k in ("model", "temperature", "max_tokens", "seed")} == {
            "model": "m",
            "temperature": 0.0,
            "max_tokens": 64,
            "seed": 7,
        }
        assert "logprobs" not in sent and "top_logprobs" not in sent


def test_json_schema_is_strict_and_named_after_the_answer() -> None:
    sent = body("json_schema")
    assert sent["messages"] == MESSAGES
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "RelevanceJudgement", "schema": strict_schema(RelevanceJudgement), "strict": True},
    }


def test_json_object_carries_the_schema_beside_the_type() -> None:
    sent = body("json_object")
    assert sent["messages"] == MESSAGES
    assert sent["response_format"] == {"type": "json_object", "schema": strict_schema(RelevanceJudgement)}


def test_style_none_describes_the_schema_in_the_last_message_only() -> None:
    given = [dict(m) for m in MESSAGES]
    sent = body("none", given)
    assert "response_format" not in sent
    assert sent["messages"][0] == MESSAGES[0]
    last = sent["messages"][-1]["content"]
    assert last.startswith("judge this\n\nReply with only a JSON object")
    described = last.split("```json\n", 1)[1].removesuffix("\n```")
    assert json.loads(described) == strict_schema(RelevanceJudgement)
    assert given == MESSAGES, "the caller's messages (the prompt a re-ask repeats) are left as they were"


def test_logprobs_are_asked_for_when_wanted() -> None:
    sent = body("json_schema", logprobs=5)
    assert sent["logprobs"] is True and sent["top_logprobs"] == 5
    assert "logprobs" not in body("json_schema")


@pytest.mark.parametrize(
    "url, keyed",
    [
        ("http://localhost:8000/v1/", "http://localhost:8000/v1"),
        ("https://user:secret@api.example.com/v1", "https://api.example.com/v1"),
        ("https://api.example.com:8443/v1#frag", "https://api.example.com:8443/v1"),
        ("https://fn.example.net/api/v1?code=fnkey123&encode=utf8", "https://fn.example.net/api/v1?encode=utf8"),
    ],
)
def test_public_url_drops_credentials_and_the_trailing_slash(url: str, keyed: str) -> None:
    assert public_url(url) == keyed


def test_a_body_that_is_not_a_completion_is_kept_as_text_to_fail_parsing() -> None:
    good = decode_completion(
        b'{"choices": [{"message": {"content": "{}"}, "finish_reason": "stop"}], '
        b'"usage": {"prompt_tokens": 3, "completion_tokens": 1}}'
    )
    assert (good.text, good.finish_reason, good.prompt_tokens, good.completion_tokens) == ("{}", "stop", 3, 1)
    bad = decode_completion(b"<html>bad gateway</html>")
    assert bad.text == "<html>bad gateway</html>" and bad.finish_reason is None


def test_a_key_is_never_sent_in_clear_to_another_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    from ifsynth.flows.llm.route import sendable_key

    monkeypatch.setenv("OPENAI_API_KEY", "sk-abc123")
    monkeypatch.setenv("MY_KEY", "sk-mine")
    said: list[str] = []
    assert sendable_key("http://10.0.0.5:8000/v1", "OPENAI_API_KEY", said.append) is None
    assert sendable_key("http://127.0.0.1:8000/v1", "MY_KEY", said.append) == "sk-mine"
    assert sendable_key("http://127.0.0.1:8000/v1", "OPENAI_API_KEY", said.append) == "sk-abc123"
    assert sendable_key("https://api.openai.com/v1", "OPENAI_API_KEY", said.append) == "sk-abc123"
    assert sendable_key("https://gw.example.com/v1", "OPENAI_API_KEY", said.append) == "sk-abc123"
    assert sendable_key("https://gw.example.com/v1", "OPENAI_API_KEY", said.append) == "sk-abc123"
    assert said == [
        "not sending OPENAI_API_KEY to http://10.0.0.5:8000/v1: plain http to another machine; use https",
        "sending OPENAI_API_KEY to https://gw.example.com/v1, which is not OpenAI's; set api_key_env to send another",
    ], "each said once"


def test_key_like_query_parameters_are_not_kept() -> None:
    from ifsynth.flows.llm.route import url_secrets

    url = "https://u:p4ss@gw.example.com/v1?api-version=2024-10&key=abcd1234&sig=zzzz9"
    assert public_url(url) == "https://gw.example.com/v1?api-version=2024-10"
    assert sorted(url_secrets(url)) == ["abcd1234", "p4ss", "zzzz9"]


def test_a_route_closed_makes_a_new_session_for_its_next_request(fake: FakeOpenAI) -> None:
    """Closing a route ends its session; a request after that (a stage resumed on the same route) gets a new
    one, not aiohttp's "Session is closed"."""
    route = Route(Endpoint(base_url=fake.base_url))
    request = json.dumps({"model": "m", "messages": MESSAGES}).encode()

    async def twice() -> list[int]:
        statuses = []
        for _ in range(2):
            statuses.append((await route.chat(request, 30.0)).status_code)
            await route.close()
        return statuses

    assert asyncio.run(twice()) == [200, 200]


def test_the_clients_share_one_tls_context_until_the_certificates_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_bytes(Path(certifi.where()).read_bytes())
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    shared = tls()
    route = Route(Endpoint(base_url="https://llm.example/v1"))
    assert route.client is not None and route._http is not None
    transport = route._http._transport_for_url(httpx2.URL("https://llm.example/v1/chat/completions"))
    assert getattr(transport, "ssl_context", None) is shared and tls() is shared
    bundle.write_bytes(bundle.read_bytes() + b"\n")  # the certificates updated: read again
    assert tls() is not shared
