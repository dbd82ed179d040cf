"""``ifsynth run --watch``: the same run again, in the same process, each time a file it reads changes.

A prompt being tuned is run again and again. As separate commands each run pays the imports (Prefect, the
openai SDK: most of a fully cached rerun's 2 s); in one process they are paid once, and a run costs its new
requests and the reading of its cached answers (README, "Tuning a prompt").

The files are compared by their content with what they were when the run read them, by polling: a change
saved while a run is in progress starts the next run as soon as it ends, which an event watcher started
after the run would miss, and a filesystem's coarse modification times cannot hide a save. A recipe has a
handful of templates of a few kB; a poll reads them in well under a millisecond.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from importlib import resources
from pathlib import Path

from ifsynth.flows.run.registry import recipe
from ifsynth.schemas.config import RunConfig

TEMPLATE_SUFFIX = ".j2"
POLL_SECONDS = 0.1

Identity = tuple[int, str]  # a file's size and a digest of its bytes
Snapshot = dict[Path, Identity]


class Watched:
    """What a rerun reads again: the recipe's templates (the built-in ones where they are files on disk, an
    editable install or a checkout, and those of ``--prompts-dir``) and the ``--config`` file, as they are
    when this is made (just before a run reads its templates) and, for the config file, as ``config_read``
    found it (``file_identity`` taken before the settings were read from it: a save in between is a change)."""

    def __init__(self, config: RunConfig, config_file: str | None, config_read: Identity | None) -> None:
        builtin = resources.files(recipe(config.recipe).prompts)
        roots = [Path(str(builtin))] if isinstance(builtin, Path) else []
        if config.prompts_dir is not None:
            roots.append(Path(config.prompts_dir))
        self.folders = sorted({(root / config.recipe).resolve() for root in roots})
        self.file = Path(config_file).resolve() if config_file else None
        self._seen = self._snapshot()
        if self.file is not None:
            self._seen.pop(self.file, None)
            if config_read is not None:
                self._seen[self.file] = config_read

    def describe(self) -> str:
        templates = [f"{folder}/*{TEMPLATE_SUFFIX}" for folder in self.folders]
        return ", ".join(templates + ([str(self.file)] if self.file else []))

    def wait(self) -> list[str]:
        """Blocks until a watched file is not what it was when last seen, and has stayed so for one poll (an
        editor may save in steps); the names of the files that changed. Ctrl-C raises KeyboardInterrupt."""
        while True:
            now = self._snapshot()
            time.sleep(POLL_SECONDS)
            if now != self._seen and self._snapshot() == now:
                changed = [path for path in now.keys() | self._seen.keys() if now.get(path) != self._seen.get(path)]
                self._seen = now
                return sorted({path.name for path in changed})

    def _snapshot(self) -> Snapshot:
        found: Snapshot = {}
        for folder in self.folders:
            with contextlib.suppress(OSError), os.scandir(folder) as entries:
                for entry in entries:
                    if entry.name.endswith(TEMPLATE_SUFFIX) and (identity := file_identity(entry.path)) is not None:
                        found[Path(entry.path)] = identity
        if self.file is not None and (identity := file_identity(self.file)) is not None:
            found[self.file] = identity
        return found


def file_identity(path: str | Path | None) -> Identity | None:
    """What tells a file's versions apart: its content (a save that changes nothing is no change); None when
    there is no such file, or it cannot be read (a save in progress, a folder)."""
    try:
        data = Path(path).read_bytes() if path else None
    except OSError:
        return None
    return None if data is None else (len(data), hashlib.blake2b(data, digest_size=16).hexdigest())
