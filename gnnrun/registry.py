"""Name -> implementation tables, so that choosing an algorithm is a lookup, not an if-chain."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from gnnrun.errors import GnnrunError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(entry: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = entry
            return entry

        return add

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise GnnrunError(
                f"unknown {self.kind} {name!r}; choose one of: {', '.join(sorted(self._entries))}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
