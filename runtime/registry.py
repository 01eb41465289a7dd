"""Names that select an implementation, one registry per kind (mini-sglang's ``utils/registry.py``).

A kind's module creates its registry and registers each variant beside its definition; CLI
choices, knob validation and help text are derived from the registries, never kept by hand::

    CHUNKING = Registry[Chunking]("chunking")

    @CHUNKING.register
    @dataclass(frozen=True, slots=True)
    class Mpu: ...
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar


class Named(Protocol):
    @property
    def name(self) -> str: ...


T = TypeVar("T", bound=Named)


class Registry(Generic[T]):
    """The variants of one kind by name, in registration order (the first is the kind's default).

    ``field``: the attribute a composition (a policy) keeps this kind's variant in, when it is not
    the kind's name (``stage-admission`` -> ``stage_admission``)."""

    def __init__(self, kind: str, field: str | None = None, doc: str = "") -> None:
        self.kind = kind
        self.field = field or kind.replace("-", "_")
        self.doc = doc
        self._items: dict[str, T] = {}

    def register(self, item: Any) -> Any:
        """Register a variant: an instance, or a class with no required arguments (registered as its
        default instance and returned unchanged, so it works as a decorator)."""
        instance = item() if isinstance(item, type) else item
        name = instance.name
        if name in self._items:
            raise ValueError(f"{self.kind}: a variant named {name!r} is registered already")
        self._items[name] = instance
        return item

    def get(self, name: str) -> T:
        """The variant called ``name``; ValueError naming the known ones."""
        try:
            return self._items[name]
        except (KeyError, TypeError):
            raise ValueError(f"unknown {self.kind} variant {str(name)[:40]!r} "
                             f"(known: {', '.join(self.supported_names())})") from None

    def assert_supported(self, name: str) -> None:
        self.get(name)

    def supported_names(self) -> list[str]:
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[T]:
        return iter(self._items.values())

    def __len__(self) -> int:
        return len(self._items)

    def describe(self, line: Callable[[T], str] | None = None) -> str:
        """``name`` (or ``line(variant)``) of each variant, for help text."""
        return ", ".join(line(v) if line else v.name for v in self)
