"""Config spaces: the knobs of a schedule template and the points (configs) among them.

A :class:`Knob` is one named choice with a finite list of JSON-friendly options (ints,
strings, bools); a :class:`ConfigSpace` is the product of its knobs, indexed in mixed
radix (the first knob varies fastest) so that a config is also one integer. Tuners work
with indices and per-knob digits; templates read a :class:`Config` by knob name.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError

#: what a knob controls; features and reports group knobs by it
KNOB_KINDS = ("split", "order", "unroll", "vectorize", "parallel", "layout", "threads",
              "location", "rfactor")


@dataclass(frozen=True)
class Knob:
    """One schedule decision: ``name``, what it controls (``kind``, one of KNOB_KINDS)
    and its ``options`` in a fixed order."""

    name: str
    kind: str
    options: tuple

    def __post_init__(self):
        if self.kind not in KNOB_KINDS:
            raise InputError(f"knob {self.name!r}: kind {self.kind!r} is not one of "
                             f"{', '.join(KNOB_KINDS)}")
        if not self.options:
            raise InputError(f"knob {self.name!r} has no options; give it at least one")
        if len(set(self.options)) != len(self.options):
            raise InputError(f"knob {self.name!r} lists an option twice: {self.options}")

    def position(self, value) -> int:
        """Index of ``value`` among the options."""
        try:
            return self.options.index(value)
        except ValueError:
            raise InputError(f"knob {self.name!r} has no option {value!r}; its options are "
                             f"{list(self.options)}") from None


@dataclass(frozen=True)
class Config:
    """One point of a space: its ``index`` and the chosen option of every knob."""

    index: int
    values: Mapping[str, object] = field(hash=False, compare=False)

    def __getitem__(self, knob: str):
        try:
            return self.values[knob]
        except KeyError:
            raise InputError(f"config {self.index} has no knob {knob!r}; it has "
                             f"{', '.join(self.values)}") from None

    def to_json(self) -> dict:
        return dict(self.values)


@dataclass(frozen=True)
class ConfigSpace:
    """The product of ``knobs``; configs are numbered 0 .. size - 1."""

    knobs: tuple[Knob, ...]

    def __post_init__(self):
        names = [k.name for k in self.knobs]
        if len(set(names)) != len(names):
            raise InputError(f"config space names a knob twice: {names}")

    @property
    def size(self) -> int:
        return math.prod(len(k.options) for k in self.knobs)

    @property
    def radices(self) -> tuple[int, ...]:
        return tuple(len(k.options) for k in self.knobs)

    def digits(self, index: int) -> tuple[int, ...]:
        """Per-knob option positions of config ``index``."""
        if not 0 <= index < self.size:
            raise InputError(f"config index {index} is outside this space (size {self.size})")
        found = []
        for radix in self.radices:
            index, digit = divmod(index, radix)
            found.append(digit)
        return tuple(found)

    def index_of_digits(self, digits: Sequence[int]) -> int:
        """The config index of per-knob option positions."""
        index = 0
        for digit, radix in zip(reversed(digits), reversed(self.radices)):
            index = index * radix + int(digit)
        return index

    def get(self, index: int) -> Config:
        """Config number ``index``."""
        digits = self.digits(index)
        return Config(index, {k.name: k.options[d] for k, d in zip(self.knobs, digits)})

    def from_values(self, values: Mapping[str, object]) -> Config:
        """The config choosing ``values`` (a mapping knob name -> option)."""
        missing = [k.name for k in self.knobs if k.name not in values]
        if missing:
            raise InputError(f"config {dict(values)} lacks knobs {missing}")
        digits = [k.position(_from_json(values[k.name])) for k in self.knobs]
        return self.get(self.index_of_digits(digits))

    def adopt(self, values: Mapping[str, object],
              fallback: Mapping[str, object] | None = None) -> Config | None:
        """The config of this space nearest to a point of another (e.g. a similar task's
        best): each knob takes ``values``' choice where it is one of its options, else
        ``fallback``'s (e.g. this space's own best point); None where a knob has neither.

        >>> space = ConfigSpace((Knob("tile", "split", ((1, 4), (2, 2))),
        ...                      Knob("unroll", "unroll", (0, 16))))
        >>> space.adopt({"tile": (1, 8), "unroll": 16}, {"tile": (2, 2)}).values
        {'tile': (2, 2), 'unroll': 16}
        """
        digits = []
        for knob in self.knobs:
            chosen = [_from_json(found[knob.name]) for found in (values, fallback or {})
                      if knob.name in found]
            options = [value for value in chosen if value in knob.options]
            if not options:
                return None
            digits.append(knob.options.index(options[0]))
        return self.get(self.index_of_digits(digits))

    def random_indices(self, rng: np.random.Generator, count: int,
                       exclude: Iterable[int] = ()) -> list[int]:
        """Up to ``count`` distinct random indices not in ``exclude``."""
        excluded = set(exclude)
        free = self.size - len(excluded)
        count = min(count, free)
        if free <= 4 * count:
            pool = [i for i in range(self.size) if i not in excluded]
            return [int(i) for i in rng.permutation(pool)[:count]]
        chosen: list[int] = []
        taken = set(excluded)
        while len(chosen) < count:
            # a uniform option per knob is a uniform point of the space, of any size (a
            # function's sketch with a Winograd choice has more than 2**63 points, which
            # one integer draw of NumPy cannot span)
            index = self.index_of_digits([int(rng.integers(radix)) for radix in self.radices])
            if index not in taken:
                taken.add(index)
                chosen.append(index)
        return chosen

    def neighbor(self, index: int, rng: np.random.Generator) -> int:
        """``index`` with one knob moved to another option (itself for a one-point space)."""
        digits = list(self.digits(index))
        movable = [i for i, radix in enumerate(self.radices) if radix > 1]
        if not movable:
            return index
        knob = int(rng.choice(movable))
        step = int(rng.integers(1, self.radices[knob]))
        digits[knob] = (digits[knob] + step) % self.radices[knob]
        return self.index_of_digits(digits)

    def normalized_digits(self, index: int) -> np.ndarray:
        """Per-knob option positions scaled to [0, 1] (a model's view of the knobs)."""
        return np.array([d / max(r - 1, 1) for d, r in zip(self.digits(index), self.radices)],
                        np.float64)


def _from_json(value):
    """JSON turns tuples into lists; map such a value back to the matching option."""
    if isinstance(value, list):
        return tuple(value)
    return value


def divisors(n: int) -> list[int]:
    """Every divisor of ``n`` in increasing order."""
    return [d for d in range(1, n + 1) if n % d == 0]


def split_options(extent: int, candidates: Sequence[int]) -> tuple[int, ...]:
    """The ``candidates`` usable as a split factor of a loop of ``extent`` (at most the
    extent; the extent itself stands in when none fits), in increasing order."""
    fitting = sorted({c for c in candidates if 1 <= c <= extent})
    return tuple(fitting) if fitting else (extent,)
