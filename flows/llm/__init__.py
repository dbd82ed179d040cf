"""The LLM gateway: routing, retries, answer parsing, limits, batch mode, the local model.

It knows no stage and no recipe.

The openai SDK and aiohttp are imported on first use, not when this package is: together they take about half
a second of CPU to import, and a run whose every answer is in the cache (a prompt being tuned, a run resumed)
never sends a request. The modules here take them as ``from ifsynth.flows.llm import openai``: the module,
which loads itself when an attribute of it is first read (a client built, an exception class matched). An
``import openai`` statement would load it at once (the import system reads the module's ``__spec__``).
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING


def _on_first_use(name: str) -> ModuleType:
    """Module ``name``, executed on its first attribute access (the standard library's ``LazyLoader``), or as
    it is if something imported it already."""
    if name not in sys.modules:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        spec.loader = importlib.util.LazyLoader(spec.loader)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


if TYPE_CHECKING:
    import aiohttp as aiohttp
    import openai as openai
else:
    openai = _on_first_use("openai")
    aiohttp = _on_first_use("aiohttp")
