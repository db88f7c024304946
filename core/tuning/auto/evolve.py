"""Evolutionary search over a sketch's space, guided by the XGBoost cost model.

Each batch starts from a population of the best measured points and fresh random ones
(random annotation: every knob drawn uniformly), then runs a few generations of
mutations and crossover, keeping the points the cost model (:class:`..tuners.CostModel`,
retrained on every measured batch, on features of the lowered TIR) ranks highest; the
best unmeasured ones are measured, with a few random points for exploration. The
first points, measured before the model has learnt anything, and the random half of
every population are drawn by the sketch's sampling rules (parallel tile loops, a
vectorized inner loop wherever the sketch offers them, as Ansor's initial population,
and register tiles that fit the CPU's vector registers); the exploration points stay
uniform.

Mutations follow the Ansor paper: a **tile-size** mutation moves a prime factor of one
loop's tile from one level to another (the loop's extent is kept), or resizes its
innermost level to another size the sketch offers under the same outer levels (register
tiles that do not divide the loop, e.g. 12 of 1024 rows, are reached no other way: no
prime move leads from 8 to 12 within the loop's divisors); an **annotation**
mutation changes a parallel / vectorize / unroll choice; a **compute-location**
mutation moves a stage (inline, root, the tile level it is computed at). Crossover
takes each stage's decisions (its knobs, by their ``a<n>.`` / ``p<n>.`` prefix) from
one of two parents. A child that breaks the sketch's sampling rules (a parallel loop
of fewer iterations than cores, a register tile not unrolled whole: see
:meth:`~.sketch.Sketch.admissible`) is dropped.
"""

from __future__ import annotations

import math

import numpy as np

from ..task import Task
from ..tuners import CostModel, ModelGuidedTuner


def _prime_factors(value: int) -> list[int]:
    found, p = [], 2
    while p * p <= value:
        while value % p == 0:
            found.append(p)
            value //= p
        p += 1
    if value > 1:
        found.append(value)
    return found


#: knob kinds of the annotations a random first point always takes (see
#: :meth:`EvolutionaryTuner.random_index`)
ANNOTATIONS = ("parallel", "vectorize")


class EvolutionaryTuner(ModelGuidedTuner):
    """The auto search's tuner (see the module docstring). ``population`` points evolve
    for ``generations`` per batch; the first ``initial`` measurements are random."""

    name = "auto"

    def __init__(self, task: Task, seed: int = 0, model: CostModel | None = None,
                 initial: int = 8, population: int = 32, generations: int = 3,
                 crossover: float = 0.3, epsilon: float = 0.1):
        super().__init__(task, seed, model)
        self.initial, self.population, self.generations = initial, population, generations
        self.crossover_rate, self.epsilon = crossover, epsilon
        knobs = self.space.knobs
        self._options = [{option: i for i, option in enumerate(k.options)} for k in knobs]
        # per split knob: the options sharing each outer-levels prefix (innermost resizes)
        self._siblings: list[dict[tuple, list[int]]] = []
        for knob in knobs:
            siblings: dict[tuple, list[int]] = {}
            for i, option in enumerate(knob.options):
                if knob.kind == "split" and isinstance(option, tuple) and option:
                    siblings.setdefault(option[:-1], []).append(i)
            self._siblings.append(siblings)
        self._groups: dict[str, list[int]] = {}
        for position, knob in enumerate(knobs):
            self._groups.setdefault(knob.name.split(".")[0], []).append(position)

    # ------------------------------------------------------------------ points

    def random_index(self, annotated: bool = False) -> int:
        """A uniformly random point (every knob drawn independently); ``annotated``:
        drawn by the template's sampling rules where it has them (a sketch's
        :meth:`~.sketch.Sketch.sample_values`: annotated, register tiles that fit the
        CPU), else with its tile loops parallel and its inner loop vectorized wherever
        the sketch offers it (the annotations every fast CPU point has: a first point
        without them only teaches the model that scalar code is slow)."""
        sample = self.task.definition.sample
        if annotated and sample is not None:
            return self.space.from_values(sample(self.task.args, self.rng)).index
        digits = [int(self.rng.integers(r)) for r in self.space.radices]
        if annotated:
            for position, knob in enumerate(self.space.knobs):
                if knob.kind in ANNOTATIONS and True in knob.options:
                    digits[position] = knob.options.index(True)
        return self.space.index_of_digits(digits)

    def _admissible(self, index: int) -> bool:
        """Whether the point keeps the template's sampling rules (see
        :attr:`~..templates.Template.admissible`)."""
        rule = self.task.definition.admissible
        return rule is None or rule(self.task.args, self.space.get(index).values)

    def _random_unvisited(self, count: int, exclude: set[int],
                          annotated: bool = False) -> list[int]:
        found: list[int] = []
        for _ in range(20 * count):
            if len(found) >= count:
                break
            index = self.random_index(annotated)
            if index not in self.visited and index not in exclude and index not in found:
                found.append(index)
        return found

    def mutate(self, index: int) -> int:
        """``index`` with one knob changed by a tile-size, annotation or compute-location
        mutation (itself when no knob can change)."""
        digits = list(self.space.digits(index))
        movable = [i for i, r in enumerate(self.space.radices) if r > 1]
        if not movable:
            return index
        position = int(self.rng.choice(movable))
        knob = self.space.knobs[position]
        current = knob.options[digits[position]]
        if knob.kind == "split" and isinstance(current, tuple) and current:
            if self.rng.random() < 0.5:
                others = [i for i in self._siblings[position][current[:-1]]
                          if i != digits[position]]
                if others:
                    digits[position] = int(self.rng.choice(others))
                    return self.space.index_of_digits(digits)
            moved = self._move_factor(current)
            if moved in self._options[position]:
                digits[position] = self._options[position][moved]
                return self.space.index_of_digits(digits)
        step = int(self.rng.integers(1, self.space.radices[position]))
        digits[position] = (digits[position] + step) % self.space.radices[position]
        return self.space.index_of_digits(digits)

    def _move_factor(self, tiles: tuple[int, ...]) -> tuple[int, ...]:
        """Move one prime factor between two levels of a tile (level -1: the outermost,
        whose extent is the rest of the loop)."""
        levels = [-1, *range(len(tiles))]
        source, target = self.rng.choice(levels, size=2, replace=False)
        values = list(tiles)
        if source >= 0:
            primes = _prime_factors(values[source])
            if not primes:
                return tiles
            prime = int(self.rng.choice(primes))
            values[source] //= prime
        else:
            prime = int(self.rng.choice([2, 3]))
        if target >= 0:
            values[target] *= prime
        return tuple(values)

    def crossover(self, a: int, b: int) -> int:
        """Each stage's knobs from parent ``a`` or ``b``."""
        da, db = self.space.digits(a), self.space.digits(b)
        digits = list(da)
        for positions in self._groups.values():
            if self.rng.random() < 0.5:
                for position in positions:
                    digits[position] = db[position]
        return self.space.index_of_digits(digits)

    # ------------------------------------------------------------------ proposing

    def _propose(self, size: int) -> list[int]:
        if len(self.costs) < self.initial or not self.model.trained:
            return self._random_unvisited(size, set(), annotated=True)
        measured = sorted((c, i) for i, c in self.costs.items() if math.isfinite(c))
        population = [i for _, i in measured[:self.population // 2]]
        population += self._random_unvisited(self.population - len(population),
                                             set(population), annotated=True)
        scores = dict(zip(population, self.model.predict(self.features(population))))
        for _ in range(self.generations):
            ranked = sorted(scores, key=scores.get, reverse=True)[:self.population]
            weights = np.exp(np.array([scores[i] for i in ranked]) - scores[ranked[0]])
            weights /= weights.sum()
            children = []
            for _ in range(self.population):
                parent = ranked[int(self.rng.choice(len(ranked), p=weights))]
                if self.rng.random() < self.crossover_rate:
                    other = ranked[int(self.rng.choice(len(ranked), p=weights))]
                    child = self.crossover(parent, other)
                else:
                    child = self.mutate(parent)
                if child not in scores and self._admissible(child):
                    children.append(child)
            children = list(dict.fromkeys(children))
            if children:
                scores.update(zip(children, self.model.predict(self.features(children))))
        ranked = [i for i in sorted(scores, key=scores.get, reverse=True)
                  if i not in self.visited]
        explore = sum(self.rng.random() < self.epsilon for _ in range(size))
        chosen = ranked[:size - explore]
        return chosen + self._random_unvisited(size - len(chosen), set(chosen))
