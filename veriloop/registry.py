"""Registries map short names to "module:attribute" paths, imported only when asked for.

So a missing optional dependency (vLLM, Ray, Docker) fails only when its backend is used, and
an unknown name fails with the list of names that exist.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

from veriloop.errors import ConfigError, UnknownNameError

T = TypeVar("T")


class Registry(Mapping[str, str], Generic[T]):
    """A named set of lazily imported implementations of one seam (backends, sandboxes, verifiers)."""

    def __init__(self, kind: str, entries: Mapping[str, str]) -> None:
        self.kind = kind
        self._entries = dict(entries)

    def __getitem__(self, name: str) -> str:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def register(self, name: str, target: str) -> None:
        self._entries[name] = target

    def load(self, name: str) -> T:
        """Import and return the implementation registered as `name` (or a full "module:attr" path)."""
        target = self._entries.get(name)
        if target is None and ":" in name:
            target = name
        if target is None:
            raise UnknownNameError(self.kind, name, self._entries)
        module_name, _, attribute = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(f"{self.kind} {name!r} needs a package that is not installed: {exc}") from None
        try:
            loaded: T = getattr(module, attribute)
        except AttributeError:
            raise ConfigError(f"{self.kind} {name!r}: {module_name} has no {attribute}") from None
        return loaded
