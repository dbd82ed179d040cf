"""Templates are data: ``prompts/<recipe>/<stage>.j2``, overlaid file by file from ``--prompts-dir``.

A template defines a ``system`` and a ``user`` block; rendering yields the chat messages. The hash of a
template's source is stored with every call it produced, so two runs can be compared prompt by prompt.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from jinja2 import (
    BaseLoader,
    ChainableUndefined,
    ChoiceLoader,
    Environment,
    FileSystemLoader,
    PackageLoader,
    StrictUndefined,
    Template,
    TemplateNotFound,
    UndefinedError,
    meta,
)
from jinja2.exceptions import TemplateError
from jinja2.loaders import split_template_path
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ifsynth.schemas.errors import PromptError

ROLES = ("system", "user")


class _PlaceholderUsed(UndefinedError):
    """A placeholder used where only a real value works (compared, added): the stage's own render tells."""


class _Placeholder(ChainableUndefined):
    """A value the stage gives, when a template is checked without it: text where printed, empty where
    iterated."""

    def __str__(self) -> str:
        return "..."

    def __bool__(self) -> bool:  # a condition on a given value takes its branch, so the branch is checked too
        return True


@dataclass(frozen=True)
class Rendered:
    """Chat messages rendered from one template, with the template's identity."""

    template: str
    template_hash: str
    messages: tuple[dict[str, str], ...]


BUILTIN = "ifsynth.prompts"


class Prompts:
    """Loads, renders and hashes templates; an overlay directory wins over the built-in files.

    ``package`` holds the templates (``<recipe>/<stage>.j2``): ifsynth's own, or a recipe package's."""

    def __init__(self, overlay: str | Path | None = None, package: str = BUILTIN) -> None:
        self.package = package
        loaders: list[Any] = [PackageLoader(package, "")]
        if overlay is not None:
            if not Path(overlay).is_dir():
                raise PromptError(f"--prompts-dir `{overlay}` is not a directory")
            known = builtin_templates(package)
            _check_overlay(Path(overlay), known)
            loaders.insert(0, _Overlay(Path(overlay), known))
        self.overlay = Path(overlay) if overlay is not None else None
        self._builtin = loaders[-1]
        self._loader = _ReadOnce(ChoiceLoader(loaders))
        self._env = ImmutableSandboxedEnvironment(
            loader=self._loader,
            undefined=StrictUndefined,
            keep_trailing_newline=False,
            trim_blocks=True,
            lstrip_blocks=True,
            autoescape=False,
        )
        self._hashes: dict[str, str] = {}

    def source(self, name: str) -> str:
        try:
            text, _, _ = self._loader.get_source(self._env, f"{name}.j2")
        except TemplateNotFound:
            raise PromptError(f"no template `{name}.j2` (built-in or in --prompts-dir)") from None
        return text

    def hash(self, name: str) -> str:
        if name not in self._hashes:
            self._hashes[name] = hashlib.sha256(self.source(name).encode("utf-8")).hexdigest()[:16]
        return self._hashes[name]

    def check(self, name: str) -> None:
        """Before a run sends anything: the template parses, has both blocks, and renders to a non-empty user
        message with a sample of what its stage gives it (a placeholder for each name its built-in template
        uses). A name beyond those, a failing include, an arithmetic error or runaway recursion is refused here;
        a placeholder that cannot stand in for a real value (a number compared) is left to the stage."""
        template = self._template(name)
        builtin, _, _ = self._builtin.get_source(self._env, f"{name}.j2")
        given = meta.find_undeclared_variables(self._env.parse(builtin))
        sample = {variable: _Placeholder(name=variable, exc=_PlaceholderUsed) for variable in given}
        try:
            context = template.new_context(sample)
            texts = {role: "".join(template.blocks[role](context)).strip() for role in ROLES}
        except PromptError:  # a file the overlay may not give (an include of a non-template)
            raise
        except _PlaceholderUsed:
            return
        except (TemplateError, ArithmeticError, RecursionError, UnicodeDecodeError) as exc:
            raise PromptError(f"template `{name}.j2` fails to render: {_what(exc)}") from None
        if not texts["user"]:
            raise PromptError(f"template `{name}.j2`: its `user` block renders to nothing")

    def render(self, name: str, **variables: Any) -> Rendered:
        """Render both blocks; a missing variable raises before anything is sent."""
        template = self._template(name)
        try:
            context = template.new_context(variables)
            rendered = ("".join(template.blocks[role](context)).strip() for role in ROLES)
            messages = [{"role": role, "content": text} for role, text in zip(ROLES, rendered, strict=True) if text]
        except Exception as exc:  # the template's own code, run in the sandbox: any error is the template's
            raise PromptError(f"template `{name}.j2` fails to render: {_what(exc)}") from None
        return Rendered(template=name, template_hash=self.hash(name), messages=tuple(messages))

    def _template(self, name: str) -> Template:
        """The template ``name``, parsed and holding both blocks."""
        try:
            template = self._env.get_template(f"{name}.j2")
        except TemplateNotFound:
            raise PromptError(f"no template `{name}.j2` (built-in or in --prompts-dir)") from None
        except TemplateError as exc:
            raise PromptError(f"template `{name}.j2`: {exc}") from None
        except UnicodeDecodeError:
            raise PromptError(f"template `{name}.j2` is not UTF-8 text; save it as UTF-8") from None
        for role in ROLES:
            if role not in template.blocks:
                raise PromptError(f"template `{name}.j2` has no `{{% block {role} %}}`")
        return template


class _ReadOnce(BaseLoader):
    """Each template's text as first read, for rendering and hashing alike: every call records the hash of
    the text it was rendered from, and a run renders what it fingerprinted, however the files change while it
    runs (nor does a render check the file on disk again)."""

    def __init__(self, loader: BaseLoader) -> None:
        self.loader = loader
        self._read: dict[str, tuple[str, str | None]] = {}

    def get_source(self, environment: Environment, template: str) -> tuple[str, str | None, Callable[[], bool]]:
        if template not in self._read:
            source, filename, _ = self.loader.get_source(environment, template)
            self._read[template] = (source, filename)
        source, filename = self._read[template]
        return source, filename, lambda: True

    def list_templates(self) -> list[str]:
        return self.loader.list_templates()


def _what(exc: BaseException) -> str:
    """An error of a template's code in a few words: a recursion's message would be a page of frames."""
    if isinstance(exc, RecursionError):
        return "it includes itself without end (RecursionError)"
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:200]


def builtin_templates(package: str = BUILTIN) -> set[str]:
    """``<recipe>/<stage>`` of every template ``package`` ships."""
    root = resources.files(package)
    return {
        f"{d.name}/{f.name[:-3]}" for d in root.iterdir() if d.is_dir() for f in d.iterdir() if f.name.endswith(".j2")
    }


def _check_overlay(overlay: Path, known: set[str]) -> None:
    """Every overlay template replaces a built-in one and nothing in the overlay links outside it: a misspelt
    name would be ignored, and a link (to a file, or a recipe's whole folder) could pull any file of the
    machine into a prompt."""
    root = overlay.resolve()
    for folder, dirs, files in os.walk(overlay):  # links to folders are listed, not followed
        for entry in sorted([*dirs, *files]):
            path = Path(folder, entry)
            name = path.relative_to(overlay).as_posix()
            if not path.resolve().is_relative_to(root):
                raise PromptError(f"--prompts-dir: `{name}` points outside the folder; copy the file in instead")
            if name.endswith(".j2") and name[:-3] not in known:
                siblings = sorted(k for k in known if k.split("/")[0] == name.split("/")[0])
                raise PromptError(
                    f"--prompts-dir: `{name}` replaces no built-in template; "
                    f"those of its recipe: {', '.join(siblings) or 'none (no such recipe)'}"
                )


class _Overlay(FileSystemLoader):
    """``--prompts-dir`` as Jinja reads it: a name is served only when it is a built-in template's and a
    regular file inside the folder (checked again here: the folder may change after the check). Any other file
    of the folder that a template names (``{% include %}``) is refused, never read into a prompt."""

    def __init__(self, overlay: Path, known: set[str]) -> None:
        super().__init__(str(overlay))
        self.root, self.known = overlay.resolve(), known

    def get_source(self, environment: Environment, template: str) -> tuple[str, str, Callable[[], bool]]:
        path = self.root.joinpath(*split_template_path(template))
        if not os.path.lexists(path):
            raise TemplateNotFound(template)  # the built-in one, if there is one
        if not template.endswith(".j2") or template[:-3] not in self.known:
            raise PromptError(
                f"--prompts-dir: `{template}` is not a template ifsynth has; a template includes only those"
            )
        real = path.resolve()
        if not real.is_relative_to(self.root) or not real.is_file():
            raise PromptError(f"--prompts-dir: `{template}` points outside the folder; copy the file in instead")
        return super().get_source(environment, template)
