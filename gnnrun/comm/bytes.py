"""Bytes a rank sends, by what they are for."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ByteCounter:
    sent: dict[str, int] = field(default_factory=dict)  # by purpose, e.g. "features", "allreduce"

    def add(self, purpose: str, nbytes: int) -> None:
        self.sent[purpose] = self.sent.get(purpose, 0) + int(nbytes)

    def total(self) -> int:
        return sum(self.sent.values())

    def reset(self) -> dict[str, int]:
        sent, self.sent = self.sent, {}
        return sent
