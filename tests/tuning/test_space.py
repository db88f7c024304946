import numpy as np
import pytest

from heterocc.errors import InputError
from heterocc.tuning.space import ConfigSpace, Knob, divisors, split_options


def _space():
    return ConfigSpace((Knob("a", "split", (1, 2, 4)), Knob("b", "order", ("x", "y")),
                        Knob("c", "unroll", (True, False))))


def test_indices_and_values_round_trip():
    space = _space()
    assert space.size == 12
    seen = set()
    for index in range(space.size):
        config = space.get(index)
        assert space.from_values(config.to_json()).index == index
        seen.add(tuple(config.values.values()))
    assert len(seen) == 12


def test_bad_values_name_the_knob():
    space = _space()
    with pytest.raises(InputError, match="'a' has no option 3"):
        space.from_values({"a": 3, "b": "x", "c": True})
    with pytest.raises(InputError, match="lacks knobs"):
        space.from_values({"a": 1})
    with pytest.raises(InputError, match="outside this space"):
        space.get(12)


def test_random_indices_are_distinct_and_exclude():
    space = _space()
    rng = np.random.default_rng(0)
    picked = space.random_indices(rng, 20, exclude={0, 1})
    assert len(picked) == 10 and len(set(picked)) == 10 and not {0, 1} & set(picked)


def test_random_indices_span_a_space_larger_than_an_int64():
    # 40 knobs of 7 options: about 6.4e33 points (a function sketch with a Winograd
    # choice has more than 2**63), drawn uniformly whatever its size
    space = ConfigSpace(tuple(Knob(f"k{i}", "split", tuple(range(7))) for i in range(40)))
    assert space.size > 2 ** 63
    rng = np.random.default_rng(0)
    picked = space.random_indices(rng, 200, exclude={0})
    assert len(set(picked)) == 200 and 0 not in picked
    assert all(0 <= index < space.size for index in picked)
    assert max(picked) > 2 ** 63  # the draws reach the whole range, not an int64's
    # each knob's option is uniform: every option of the last knob is drawn
    assert {space.digits(index)[-1] for index in picked} == set(range(7))
    for index in picked[:5]:
        assert space.from_values(space.get(index).to_json()).index == index


def test_neighbor_changes_exactly_one_knob():
    space = _space()
    rng = np.random.default_rng(1)
    for index in range(space.size):
        other = space.neighbor(index, rng)
        changed = sum(a != b for a, b in zip(space.digits(index), space.digits(other)))
        assert changed == 1


def test_split_options_and_divisors():
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert split_options(10, (4, 8, 16)) == (4, 8)
    assert split_options(3, (4, 8)) == (3,)


def test_a_point_of_another_space_is_adopted_knob_by_knob():
    # the other space's tile 8 is no option here: that knob takes the fallback's choice
    space = _space()
    adopted = space.adopt({"a": 8, "b": "y", "c": False}, {"a": 2, "b": "x", "c": True})
    assert adopted.values == {"a": 2, "b": "y", "c": False}
    assert space.adopt({"a": 4, "b": "x", "c": True}).index == space.from_values(
        {"a": 4, "b": "x", "c": True}).index
    # JSON's lists are tuples again, as in a log
    tiles = ConfigSpace((Knob("t", "split", ((1, 4), (2, 2))),))
    assert tiles.adopt({"t": [2, 2]}).values == {"t": (2, 2)}
    # a knob neither point can give (no fallback, or a knob the other space lacks)
    assert space.adopt({"a": 8, "b": "y", "c": False}) is None
    assert space.adopt({"a": 4, "b": "y"}) is None
