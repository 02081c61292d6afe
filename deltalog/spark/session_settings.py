"""Session settings a write needs, held while some write of this process needs them.

Spark's Parquet writer takes a few settings only from the session, not from a write's options: the
timestamp type (Delta readers need real Parquet timestamps, not INT96), variant shredding (the plain
encoding is what every reader takes) and the commit protocol class (files written at their final keys on
an object store). Each is set when the first write needing it starts and put back as it was when the
last such write ends: a host that shares the session (its own Spark jobs beside dbt's) finds its
settings as it left them, and writes on several threads never undo each other's."""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Dict, Iterator, List, Tuple

_lock = threading.Lock()
# (the session, the key) -> [writes holding it, the value before the first, the value held]
_held: Dict[Tuple[int, str], List[Any]] = {}


@contextlib.contextmanager
def held(spark: Any, settings: Dict[str, str]) -> Iterator[None]:
    """`settings` set in `spark`'s session for the block, then restored once no other block holds them."""
    conf = spark.conf
    taken = []
    with _lock:
        for key, value in settings.items():
            slot = _held.get((id(spark), key))
            if slot is None:
                before = conf.get(key, None)
                if before != value:
                    conf.set(key, value)
                slot = _held[(id(spark), key)] = [0, before, value]
            slot[0] += 1
            taken.append(key)
    try:
        yield
    finally:
        with _lock:
            for key in taken:
                slot = _held[(id(spark), key)]
                slot[0] -= 1
                if slot[0] == 0:
                    del _held[(id(spark), key)]
                    if slot[1] != slot[2]:
                        if slot[1] is None:
                            conf.unset(key)
                        else:
                            conf.set(key, slot[1])
