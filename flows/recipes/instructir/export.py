"""What InstructIR's cards say: its releases take the generic formats (BEIR is the layout InstructIR released)."""

from __future__ import annotations

from typing import Any

from ifsynth.warehouse.cards import CardFacts


def card(_: dict[str, Any]) -> CardFacts:
    return CardFacts(license_name="ms-marco", license_link="https://microsoft.github.io/msmarco/")
