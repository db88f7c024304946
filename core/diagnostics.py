"""Fallbacks said out loud: warnings a compile collects, errors under ``strict``.

Whenever heterocc does something other than what the user asked for (a target that
takes nothing, a model the accelerator cannot run, a kernel emulated on the CPU for
want of a GPU, an op that runs on NumPy), it calls :func:`report_fallback`. Inside
:func:`collecting` (what ``heterocc.compile`` wraps each build in) the sentence is
logged once through the ``heterocc`` logger as a warning and kept, so that the
compiled model and its placement report can say it again; with ``strict=True`` it is
raised as a :class:`~heterocc.errors.FallbackError` instead. Outside a compile it is
only logged.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from .errors import FallbackError

logger = logging.getLogger("heterocc")


@dataclass
class Fallbacks:
    """The fallback sentences of one compile, in the order they happened, each once."""

    strict: bool = False
    messages: list[str] = field(default_factory=list)

    def add(self, message: str) -> None:
        if self.strict:
            raise FallbackError(f"{message} (strict mode: no silent fallback)")
        if message not in self.messages:
            self.messages.append(message)
            logger.warning(message)


_current: contextvars.ContextVar[Fallbacks | None] = contextvars.ContextVar(
    "heterocc_fallbacks", default=None)


@contextlib.contextmanager
def collecting(strict: bool = False,
               into: Fallbacks | None = None) -> Iterator[Fallbacks]:
    """Collect the :func:`report_fallback` calls made inside (``into``: add to an
    existing collection, e.g. the one of the compile that started earlier)."""
    found = into if into is not None else Fallbacks(strict)
    token = _current.set(found)
    try:
        yield found
    finally:
        _current.reset(token)


def report_fallback(message: str) -> None:
    """Say that heterocc fell back from what was asked (a full sentence that says what
    happened and what to do): a warning, or a FallbackError under ``strict``."""
    found = _current.get()
    if found is None:
        logger.warning(message)
    else:
        found.add(message)


def progress(items: Iterable, what: str, total: int | None = None,
             every: float = 2.0) -> Iterator:
    """``items`` again, logging ``what: i/total (s)`` at INFO at most once per ``every``
    seconds (the first only after ``every`` seconds: short work prints nothing) and once
    at the end when any line was printed."""
    start = last = time.perf_counter()
    said = False
    done = 0
    for done, item in enumerate(items, 1):
        yield item
        now = time.perf_counter()
        if now - last >= every:
            of = f"/{total}" if total is not None else ""
            logger.info(f"{what}: {done}{of} ({now - start:.1f} s)")
            last, said = now, True
    if said:
        logger.info(f"{what}: done, {done} in {time.perf_counter() - start:.1f} s")
