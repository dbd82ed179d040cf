"""From a config file, ``--set KEY=VALUE`` pairs and run flags to one validated RunConfig.

Precedence, lowest first: recipe defaults, the config file, ``--set``, explicit flags. Keys that are not
about the run itself (model, endpoint, ...) are the recipe's parameters.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ifsynth.flows.llm.local_model import LOCAL_BASE_URL, LOCAL_MODEL, model_name, weights
from ifsynth.flows.llm.route import DEFAULT_KEY_ENV, OPENAI_BASE_URL, OPENAI_DEFAULT_MODEL, api_key, public_url
from ifsynth.flows.run.registry import recipe
from ifsynth.schemas.config import Endpoint, RecipeParams, RunConfig
from ifsynth.schemas.errors import ConfigError

RUN_KEYS = {"limit", "name", "model", "judge_model", "judge_endpoint", "prompts_dir", "prices", "seeds"}
RUN_KEYS |= {"max_calls", "max_cost", "batch", "batch_poll_seconds", "max_failure_share", "stage_by_stage"}
ENDPOINT_KEYS = set(Endpoint.model_fields)


MAX_CONFIG_BYTES = 1_000_000


def load_file(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if path.exists() and not path.is_file():
        raise ConfigError(f"config file `{path}` is not a regular file")
    if path.is_file() and path.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file `{path}` is over {MAX_CONFIG_BYTES // 1000} kB; a config is a few lines")
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except FileNotFoundError:
        raise ConfigError(f"config file `{path}` does not exist") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file `{path}` is not UTF-8 text") from None
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"config file `{path}` does not parse: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file `{path}` must hold a mapping of keys to values")
    return data


def apply_sets(data: dict[str, Any], sets: list[str]) -> dict[str, Any]:
    """``a.b=1`` sets data["a"]["b"] = 1; values are read as YAML, so lists and numbers work."""
    for assignment in sets:
        key, sep, raw = assignment.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set `{assignment}` must look like KEY=VALUE")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = data
        *path, last = key.strip().split(".")
        for part in path:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set `{assignment}`: `{part}` is not a section")
        node[last] = value
    return data


def resolve(
    recipe_name: str,
    *,
    seeds: str | None,
    config_file: str | None = None,
    sets: list[str] | None = None,
    **flags: Any,
) -> RunConfig:
    data = load_file(config_file) if config_file else {}
    data = apply_sets(data, sets or [])
    data.update({key: value for key, value in flags.items() if value is not None})
    if seeds is not None:
        data["seeds"] = seeds
    if "seeds" not in data:
        raise ConfigError("give --seeds (demo, beir:DIR or irds:ID)")

    for section in ("endpoint", "judge_endpoint", "prices"):
        if data.get(section) is not None and not isinstance(data[section], dict):
            raise ConfigError(f"setting `{section}` must be a section of keys (`{section}.KEY=VALUE`)")
    endpoint = dict(data.pop("endpoint", {}) or {})
    endpoint.update({key: data.pop(key) for key in list(data) if key in ENDPOINT_KEYS})
    if isinstance(endpoint.get("base_url"), list):  # --base-url given once, or repeated for a pool
        urls = endpoint.pop("base_url")
        endpoint.update({"base_url": urls[0]} if len(urls) == 1 else {"members": [{"base_url": u} for u in urls]})
    members = endpoint.get("members")
    if members and isinstance(members, list) and isinstance(members[0], dict):
        endpoint.setdefault("base_url", members[0].get("base_url"))  # a pool is given by its members
    run = {key: data.pop(key) for key in list(data) if key in RUN_KEYS}
    if endpoint.get("local_model") is not None:
        if endpoint.get("base_url") not in (None, LOCAL_BASE_URL):
            raise ConfigError("--local-model runs the model on this machine; drop --base-url (or --local-model)")
        path = str(weights(str(endpoint["local_model"])))
        endpoint.update(base_url=LOCAL_BASE_URL, local_model=path)
        run.setdefault("model", model_name(path))
    if not endpoint.get("base_url"):
        if api_key(endpoint.get("api_key_env", DEFAULT_KEY_ENV)):
            endpoint["base_url"] = OPENAI_BASE_URL
            run.setdefault("model", OPENAI_DEFAULT_MODEL)
        else:
            if run.get("model") not in (None, LOCAL_MODEL) or run.get("judge_model") not in (None, LOCAL_MODEL):
                raise ConfigError(
                    "no --base-url and no OPENAI_API_KEY, so the embedded local model would run; "
                    "drop --model/--judge-model or give --base-url"
                )
            endpoint["base_url"] = LOCAL_BASE_URL
            run["model"] = LOCAL_MODEL
    if "model" not in run:
        raise ConfigError(f"give --model: the name of the model that {public_url(endpoint['base_url'])} serves")

    chosen = recipe(recipe_name)
    try:
        params = chosen.settings.model_validate(data)
        config = RunConfig.model_validate(
            {"recipe": recipe_name, "endpoint": endpoint, "params": params.model_dump(mode="json"), **run}
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        if error["type"] == "extra_forbidden":
            raise ConfigError(f"unknown setting `{where}` for recipe {recipe_name}") from None
        message = error["msg"].removeprefix("Value error, ")
        raise ConfigError(f"setting `{where}`: {message}" if where else f"settings: {message}") from None
    check_files(params)
    return config


def check_files(params: RecipeParams) -> None:
    """Every file the settings name exists: checked when a run is configured or started, never by a validator
    (a config is also read where those files are not: a report, a review, a merge)."""
    for setting, paths in params.files().items():
        missing = [path for path in paths if not Path(path).expanduser().is_file()]
        if missing:
            raise ConfigError(f"settings: {setting}: no file {', '.join(missing)}")
