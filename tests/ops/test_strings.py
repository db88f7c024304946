"""String ops (core/ops/strings.py) against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest
from single_node_oracle import check_inferred, compare_with_onnx, infer, onnx_outputs

from heterocc.errors import TypeInferenceError
from heterocc.ir.types import TensorType
from heterocc.ops import ShapeOperandError
from heterocc.ops.strings import python_pattern


def strings(values, shape=None) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out.reshape(shape if shape is not None else (len(values),))


def compare_strings_with_onnx(op_type, inputs, attrs=None):
    """Like compare_with_onnx for string outputs: ONNX's reference returns some of them as
    '<U' arrays instead of object arrays, so only shapes and contents are compared."""
    mine = check_inferred(op_type, inputs, attrs)[0]
    theirs = onnx_outputs(op_type, inputs, dict(attrs or {}))[0]
    assert mine.dtype == object
    assert mine.shape == theirs.shape
    assert mine.tolist() == theirs.tolist()


# ------------------------------------------------------------------------- StringConcat

@pytest.mark.parametrize("x,y", [
    (strings(["ab", "", "ü"]), strings(["c", "d", "é"])),
    (strings(["a", "b", "c", "d"], (2, 2)), strings(["-x"])),
    (strings(["a", "b"], (2, 1)), strings(["1", "2", "3"], (1, 3))),
    (strings(["cat"], ()), strings(["s"], ())),
])
def test_string_concat_matches_onnx(x, y):
    compare_strings_with_onnx("StringConcat", [x, y])


def test_string_concat_rejects_numbers():
    with pytest.raises(TypeInferenceError, match="has dtype .*; supported: object"):
        infer("StringConcat", [strings(["a"]), np.zeros(1, np.float32)])


def test_string_concat_rejects_unbroadcastable_shapes():
    with pytest.raises(TypeInferenceError, match="do not broadcast"):
        infer("StringConcat", [strings(["a", "b"]), strings(["a", "b", "c"])])


# --------------------------------------------------------------------- StringNormalizer

WEEK = ["Monday", "tuesday", "monday", "Wednesday", "THURSDAY"]


@pytest.mark.parametrize("x,attrs", [
    (strings(WEEK), {}),
    (strings(WEEK), {"case_change_action": "LOWER"}),
    (strings(WEEK, (1, 5)), {"case_change_action": "UPPER"}),
    (strings(WEEK), {"stopwords": ["monday"], "is_case_sensitive": 1}),
    (strings(WEEK, (1, 5)), {"stopwords": ["monday"], "is_case_sensitive": 1,
                             "case_change_action": "UPPER"}),
    (strings(["monday", "monday"]), {"stopwords": ["monday"], "is_case_sensitive": 1}),
    (strings(["monday"], (1, 1)), {"stopwords": ["monday"], "case_change_action": "LOWER"}),
    (strings(WEEK), {"stopwords": ["MONDAY", "thursday"], "case_change_action": "LOWER"}),
])
def test_string_normalizer_matches_onnx(x, attrs):
    compare_strings_with_onnx("StringNormalizer", [x], attrs)


def test_string_normalizer_ignores_case_of_stop_words_by_default():
    # ONNX's reference compares unchanged words exactly here; the spec says case-insensitive
    out = check_inferred("StringNormalizer", [strings(WEEK)], {"stopwords": ["MONDAY"]})[0]
    assert out.tolist() == ["tuesday", "Wednesday", "THURSDAY"]


def test_string_normalizer_accepts_locales_with_default_casing():
    for locale in ("en_US", "de-DE", "C"):
        out = check_inferred("StringNormalizer", [strings(["Straße", "Ink"])],
                             {"case_change_action": "UPPER", "locale": locale})[0]
        assert out.tolist() == ["STRASSE", "INK"]


def test_string_normalizer_output_length_depends_on_the_words():
    x = strings(WEEK)
    with pytest.raises(ShapeOperandError):
        infer("StringNormalizer", [x], {"stopwords": ["monday"]}, constant=())
    assert infer("StringNormalizer", [x], {"case_change_action": "UPPER"},
                 constant=())[0] == TensorType((5,), "object")


@pytest.mark.parametrize("x,attrs,message", [
    (strings(WEEK[:4], (2, 2)), {}, r"must have shape \[C\] or \[1, C\]"),
    (strings(WEEK), {"case_change_action": "TITLE"}, "case_change_action 'TITLE'"),
    (strings(WEEK), {"case_change_action": "UPPER", "locale": "tr_TR"}, "special case"),
])
def test_string_normalizer_rejects_bad_operands(x, attrs, message):
    with pytest.raises(TypeInferenceError, match=message):
        infer("StringNormalizer", [x], attrs)


# ----------------------------------------------------------------------- RegexFullMatch

@pytest.mark.parametrize("words,pattern", [
    (["www.google.com", "www.bbc.co.uk", "google.com"], r"www\.[\w.-]+\.\bcom\b"),
    (["abc", "ab", "abcabc", ""], r"(abc)*"),
    (["a1", "B22", "c"], r"[a-zA-Z]\d+"),
    (["Hello", "hello"], r"(?i)HELLO"),
])
def test_regex_full_match_matches_onnx(words, pattern):
    compare_with_onnx("RegexFullMatch", [strings(words)], {"pattern": pattern})


def test_regex_full_match_keeps_the_shape():
    x = strings(["a", "bb", "b", "aa", "ab", ""], (2, 3))
    out = check_inferred("RegexFullMatch", [x], {"pattern": "a*"})[0]
    np.testing.assert_array_equal(out, [[True, False, False], [True, False, True]])


def test_re2_end_of_text_escape_is_translated():
    assert python_pattern(r"ab\z") == r"ab\Z"
    out = check_inferred("RegexFullMatch", [strings(["ab", "abc"])], {"pattern": r"ab\z"})[0]
    np.testing.assert_array_equal(out, [True, False])


@pytest.mark.parametrize("pattern,message", [
    (r"\pL+", "Unicode class"),
    (r"[[:alpha:]]+", "POSIX class"),
    (r"[^[:digit:]x]", "POSIX class"),
    (r"\Qa.b\E", "literal text"),
    (r"(ab", "does not compile"),
])
def test_regex_full_match_rejects_patterns_python_cannot_run(pattern, message):
    with pytest.raises(TypeInferenceError, match=message):
        infer("RegexFullMatch", [strings(["a"])], {"pattern": pattern})


def test_regex_full_match_rejects_numbers():
    with pytest.raises(TypeInferenceError, match="has dtype .*; supported: object"):
        infer("RegexFullMatch", [np.zeros(2, np.int64)], {"pattern": "a"})
