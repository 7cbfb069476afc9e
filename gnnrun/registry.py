"""Name -> implementation tables, so that choosing an algorithm is a lookup, not an if-chain.

A registry of a config group (`group=`) also holds each entry's config schema:
registering an implementation stores its schema in Hydra's ConfigStore as
`schema/<group>/<name>`, where that group's YAML files start from it
(`defaults: [/schema/<group>/<name>@_here_, _self_]`). Schema and implementation
are declared together, in the implementation's module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from hydra.core.config_store import ConfigStore

from gnnrun.errors import GnnrunError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(
        self, kind: str, group: str | None = None, base_schema: type | None = None
    ) -> None:
        """`group`: the config group whose options this registry's names are; its entries
        get `base_schema` unless they register a schema of their own."""
        self.kind, self.group, self.base_schema = kind, group, base_schema
        self._entries: dict[str, T] = {}
        self._schemas: dict[str, type] = {}

    def register(self, name: str, schema: type | None = None) -> Callable[[T], T]:
        def add(entry: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = entry
            if self.group is not None:
                self._schemas[name] = schema or self.base_schema
                ConfigStore.instance().store(
                    group=f"schema/{self.group}", name=name, node=self._schemas[name]
                )
            elif schema is not None:
                raise ValueError(f"{self.kind} registry has no config group for {name!r}'s schema")
            return entry

        return add

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise GnnrunError(
                f"unknown {self.kind} {name!r}; choose one of: {', '.join(sorted(self._entries))}"
            ) from None

    def schema(self, name: str) -> type:
        """The config dataclass `name` was registered with."""
        self.get(name)  # the error for an unknown name
        return self._schemas[name]

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
