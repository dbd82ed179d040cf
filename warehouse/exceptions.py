"""What can go wrong with a warehouse file, each with the next step."""

from __future__ import annotations

from ifsynth.schemas.errors import IfsynthError


class WarehouseError(IfsynthError):
    pass


class WarehouseInUse(WarehouseError):
    def __init__(self, path: str, holder: str) -> None:
        self.path, self.holder = path, holder
        super().__init__(
            f"warehouse `{path}` is in use by another process ({holder}); wait for it to finish "
            "or pass --warehouse with another file"
        )


class UnknownRun(WarehouseError):
    def __init__(self, run: str | None) -> None:
        self.run = run
        what = f"no run `{run}`" if run else "no runs yet"
        super().__init__(f"{what} in this warehouse; `ifsynth runs` lists the runs")


class UnknownItem(WarehouseError):
    def __init__(self, item: str) -> None:
        self.item = item
        super().__init__(f"no item `{item}` in this warehouse; `ifsynth audit` lists items of a run")


class UnknownRelease(WarehouseError):
    def __init__(self, release: str) -> None:
        self.release = release
        super().__init__(
            f"no release `{release}`; a run makes one when it completes (`ifsynth runs`), "
            "`ifsynth import` reads a published one"
        )
