"""How many objects the garbage collector tracks among those an object holds: what a full collection
walks because of it (found by following references from it, not by counting the whole process, which
other threads change)."""

from __future__ import annotations

import gc
import types
from typing import Any

_NOT_FOLLOWED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)


def tracked_within(root: Any) -> int:
    """Tracked objects reachable from ``root`` (itself included), not through classes, modules or functions."""
    seen: set[int] = set()
    stack = [root]
    count = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _NOT_FOLLOWED) or not gc.is_tracked(obj):
            continue
        seen.add(id(obj))
        count += 1
        stack.extend(gc.get_referents(obj))
    return count
