"""Values a process makes once per key and shares between its threads (a store's client, a table's log
store). functools.lru_cache is safe to call from several threads but lets two of them that miss at
once each make a value, and hands them different objects; here the second waits and gets the first's."""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from typing import Any, Callable, TypeVar

T = TypeVar("T")


def made_once(maxsize: int) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Decorator: `fn(*args)` is called once per distinct (hashable) args, the `maxsize` most recently
    used kept. Making a value holds the cache's lock: only for values that are quick to make (no I/O)."""

    def decorate(fn: Callable[..., T]) -> Callable[..., T]:
        values: "OrderedDict[tuple, Any]" = OrderedDict()
        lock = threading.Lock()

        @functools.wraps(fn)
        def cached(*args: Any) -> T:
            with lock:
                if args in values:
                    values.move_to_end(args)
                    return values[args]
                value = fn(*args)
                values[args] = value
                if len(values) > maxsize:
                    values.popitem(last=False)
                return value

        cached.cache_size = lambda: len(values)  # type: ignore[attr-defined]
        return cached

    return decorate
