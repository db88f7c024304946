"""String ops over ONNX string tensors (IR dtype "object": NumPy object arrays of str):
StringConcat, StringNormalizer and RegexFullMatch.

They are OPAQUE: no code generator handles strings, so none may be fused into a
numeric kernel. (StringSplit is not here: its output shape depends on the data.)
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from ..errors import InputError
from ..ir.types import STRING_DTYPE, TensorType
from .common import broadcast_shapes, typed_input
from .registry import REQUIRED, FusionKind, InferContext, register_op


def _check_strings(ctx: InferContext, index: int, name: str) -> TensorType:
    return typed_input(ctx, index, name, (STRING_DTYPE,))


def _text(item) -> str:
    return item.decode("utf-8") if isinstance(item, bytes) else str(item)


#: elementwise str() over an object array (accepting bytes as UTF-8)
_as_text = np.frompyfunc(_text, 1, 1)


def _string_array(values, shape: tuple[int, ...]) -> np.ndarray:
    """An object array of ``shape`` holding ``values`` (np.array would make '<U' arrays)."""
    out = np.empty(shape, dtype=object)
    out.reshape(-1)[:] = list(values)
    return out


# ------------------------------------------------------------------------- StringConcat

def _infer_string_concat(ctx: InferContext):
    x, y = _check_strings(ctx, 0, "X"), _check_strings(ctx, 1, "Y")
    return [TensorType(broadcast_shapes(ctx, [x.shape, y.shape]), STRING_DTYPE)]


@register_op("StringConcat", infer=_infer_string_concat, fusion=FusionKind.OPAQUE)
def string_concat(x, y):
    """X + Y elementwise, with NumPy broadcasting."""
    joined = np.add(_as_text(x), _as_text(y))
    return np.asarray(joined, dtype=object)


# --------------------------------------------------------------------- StringNormalizer

_CASE_ACTIONS = ("NONE", "LOWER", "UPPER")
#: languages whose case mapping differs from Unicode's default one (dotted/dotless i, ...)
_SPECIAL_CASING_LANGUAGES = ("tr", "az", "lt")


def _kept_words(words: Sequence[str], stopwords: Sequence[str] | None,
                is_case_sensitive: int) -> list[str]:
    if not stopwords:
        return list(words)
    if is_case_sensitive:
        stops = set(stopwords)
        return [w for w in words if w not in stops]
    stops = {w.lower() for w in stopwords}
    return [w for w in words if w.lower() not in stops]


def _change_case(word: str, action: str) -> str:
    return word.lower() if action == "LOWER" else word.upper() if action == "UPPER" else word


def _normalized_shape(x_shape: tuple[int, ...], kept: int) -> tuple[int, ...]:
    """[C] -> [C'], [1, C] -> [1, C'], where an empty result keeps one empty string."""
    width = max(kept, 1)
    return (width,) if len(x_shape) == 1 else (1, width)


def _infer_string_normalizer(ctx: InferContext):
    x = _check_strings(ctx, 0, "X")
    if not (x.ndim == 1 or (x.ndim == 2 and x.shape[0] == 1)):
        raise ctx.error(f"X {x} must have shape [C] or [1, C]; Reshape it")
    action = ctx.attrs["case_change_action"]
    if action not in _CASE_ACTIONS:
        raise ctx.error(f"case_change_action {action!r} is not one of {', '.join(_CASE_ACTIONS)}")
    language = (ctx.attrs["locale"] or "").replace("-", "_").split("_")[0].lower()
    if action != "NONE" and language in _SPECIAL_CASING_LANGUAGES:
        raise ctx.error(f"locale {ctx.attrs['locale']!r} has special case mappings, which are "
                        "not implemented (only Unicode's default casing is)")
    if not ctx.attrs["stopwords"]:
        return [x]
    # removing stop words makes the output length depend on X's contents
    words = _as_text(np.asarray(ctx.value(0)).reshape(-1)).tolist()
    kept = _kept_words(words, ctx.attrs["stopwords"], ctx.attrs["is_case_sensitive"])
    return [TensorType(_normalized_shape(x.shape, len(kept)), STRING_DTYPE)]


@register_op("StringNormalizer", infer=_infer_string_normalizer, fusion=FusionKind.OPAQUE,
             attrs={"case_change_action": "NONE", "is_case_sensitive": 0, "locale": None,
                    "stopwords": None},
             shape_operands=(0,))
def string_normalizer(x, *, case_change_action, is_case_sensitive, locale, stopwords):
    """Drop the elements equal to a stop word (case-insensitively unless is_case_sensitive),
    then lower- or upper-case the rest; an empty result is one empty string."""
    words = _kept_words(_as_text(x.reshape(-1)).tolist(), stopwords, is_case_sensitive)
    changed = [_change_case(w, case_change_action) for w in words] or [""]
    return _string_array(changed, _normalized_shape(x.shape, len(words)))


# ----------------------------------------------------------------------- RegexFullMatch

#: RE2 escapes Python's re lacks: Unicode classes, literal quoting, single bytes
_UNSUPPORTED_ESCAPES = {"p": r"\p (Unicode class)", "P": r"\P (Unicode class)",
                        "Q": r"\Q...\E (literal text)", "E": r"\Q...\E (literal text)",
                        "C": r"\C (single byte)"}
_POSIX_CLASS = re.compile(r"\[:\^?[a-z]+:\]")


def python_pattern(pattern: str) -> str:
    """RE2 ``pattern`` as a Python ``re`` pattern with the same meaning; ValueError naming
    the RE2 construct when Python's ``re`` has no equivalent."""
    out = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            escaped = pattern[i + 1]
            if escaped in _UNSUPPORTED_ESCAPES:
                raise ValueError(f"the RE2 construct {_UNSUPPORTED_ESCAPES[escaped]} at "
                                 f"offset {i} is not supported")
            out.append("\\Z" if escaped == "z" else pattern[i:i + 2])  # \z: end of text
            i += 2
            continue
        posix_class = _POSIX_CLASS.match(pattern, i) if char == "[" else None
        if posix_class:
            raise ValueError(f"the POSIX class {posix_class.group()} at offset {i} is not "
                             "supported; spell it as a character range")
        out.append(char)
        i += 1
    python = "".join(out)
    try:
        re.compile(python)
    except re.error as exc:
        raise ValueError(f"it does not compile: {exc}") from None
    return python


def _infer_regex_full_match(ctx: InferContext):
    x = _check_strings(ctx, 0, "X")
    try:
        python_pattern(ctx.attrs["pattern"])
    except ValueError as exc:
        raise ctx.error(f"pattern {ctx.attrs['pattern']!r}: {exc}") from None
    return [TensorType(x.shape, "bool")]


@register_op("RegexFullMatch", infer=_infer_regex_full_match, fusion=FusionKind.OPAQUE,
             attrs={"pattern": REQUIRED})
def regex_full_match(x, *, pattern):
    """True where the whole element matches the RE2 ``pattern``."""
    try:
        regex = re.compile(python_pattern(pattern))
    except ValueError as exc:
        raise InputError(f"RegexFullMatch: pattern {pattern!r}: {exc}") from None
    matches = [regex.fullmatch(word) is not None for word in _as_text(x.reshape(-1)).tolist()]
    return np.array(matches, dtype=bool).reshape(x.shape)
