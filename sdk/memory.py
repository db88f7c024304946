"""An on-chip memory placer: a program's buffers assigned to an accelerator's memories
(banks) and given offsets, with errors that say which buffer did not fit where.

    placer = MemoryPlacer([Bank("inp", 16384), Bank("acc", 16384, alignment=4)], "dense_0")
    placer.assign("x", "inp", "DOT")      # what an instruction needs of a buffer
    placer.place("x", (4, 24))            # Placement("inp", 0, (4, 24))
    placer.layout                          # every placement, by buffer name

Offsets and capacities count in a bank's own address unit (elements, rows, tiles).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

from heterocc.errors import CompileError


@dataclass(frozen=True)
class Bank:
    """An on-chip memory: its ``name`` (any hashable key, such as an enum member),
    ``capacity`` in address units, and the ``alignment`` of every buffer's offset."""

    name: Hashable
    capacity: int
    alignment: int = 1


@dataclass(frozen=True)
class Placement:
    """Where one buffer lives: ``bank`` from ``offset``, holding ``shape``."""

    bank: Hashable
    offset: int
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        """Address units the buffer takes (the product of its shape)."""
        return math.prod(self.shape)

    @property
    def end(self) -> int:
        """The first address after the buffer."""
        return self.offset + self.size


def _label(bank: Hashable) -> str:
    return str(getattr(bank, "value", bank))


class MemoryPlacer:
    """Places the buffers of one program (``owner`` names it in errors) in ``banks``,
    each after the last, at its bank's alignment."""

    def __init__(self, banks: Iterable[Bank], owner: str = "program"):
        self.banks = {bank.name: bank for bank in banks}
        self.owner = owner
        self.layout: dict[str, Placement] = {}
        self._bank_of: dict[str, tuple[Hashable, str]] = {}
        self._next = dict.fromkeys(self.banks, 0)

    def assign(self, buffer: str, bank: Hashable, why: str = "") -> None:
        """Record that ``buffer`` must live in ``bank`` (``why``: the instruction or
        declaration that says so); CompileError when it was assigned another bank."""
        self._check_bank(bank)
        earlier = self._bank_of.setdefault(buffer, (bank, why))
        if earlier[0] != bank:
            raise CompileError(f"{self.owner}: buffer {buffer!r} is used in "
                               f"{_label(earlier[0])} ({earlier[1] or 'assigned'}) and, by "
                               f"{why or 'assignment'}, in {_label(bank)}; the machine cannot "
                               "move data between them")

    def bank_of(self, buffer: str) -> Hashable | None:
        """The bank ``buffer`` was assigned, or None."""
        found = self._bank_of.get(buffer)
        return None if found is None else found[0]

    def place(self, buffer: str, shape: Sequence[int], bank: Hashable | None = None) -> Placement:
        """Give ``buffer`` (of ``shape``) the next free, aligned offset of ``bank`` (by
        default the bank it was assigned); CompileError when it has no bank or does not
        fit, naming what the bank already holds."""
        if bank is None:
            bank = self.bank_of(buffer)
            if bank is None:
                raise CompileError(f"{self.owner}: no instruction touches buffer {buffer!r}, "
                                   "so it has no memory to live in")
        else:
            self.assign(buffer, bank)
        if buffer in self.layout:
            raise CompileError(f"{self.owner}: buffer {buffer!r} is placed twice")
        spec = self.banks[bank]
        offset = -(-self._next[bank] // spec.alignment) * spec.alignment
        placement = Placement(bank, offset, tuple(int(d) for d in shape))
        if placement.end > spec.capacity:
            held = ", ".join(f"{name} ({p.size})" for name, p in self.layout.items()
                             if p.bank == bank) or "nothing else"
            raise CompileError(f"{self.owner}: buffer {buffer!r} ({placement.size}) does not fit "
                               f"{_label(bank)}: it needs {placement.end} of its "
                               f"{spec.capacity}, which already holds {held}; use smaller "
                               "layers or tiles")
        self._next[bank] = placement.end
        self.layout[buffer] = placement
        return placement

    def used(self, bank: Hashable) -> int:
        """Address units of ``bank`` taken so far (alignment gaps included)."""
        self._check_bank(bank)
        return self._next[bank]

    def _check_bank(self, bank: Hashable) -> None:
        if bank not in self.banks:
            raise CompileError(f"{self.owner}: no memory {_label(bank)!r}; the machine has "
                               f"{', '.join(_label(b) for b in self.banks)}")


__all__ = ["Bank", "MemoryPlacer", "Placement"]
