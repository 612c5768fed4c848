"""String operators: StringNormalizer, StringConcat, StringSplit, RegexFullMatch and
TfIdfVectorizer.

String tensors are numpy object arrays of Python ``str``. Numba cannot compile loops over
Python objects, so the string work is done with Python's ``str`` methods and ``re`` (each one
call per element; there is no faster one-pass numpy form for them). TfIdfVectorizer maps its
tokens to int64 on the host side and counts n-grams in the backend's ``text.ngram_counts``
kernel (``kernels/cpu/text.py``); its lowering builds the pool's trie once per plan.
"""

from __future__ import annotations

import re
import sys
import threading
import unicodedata
from typing import Any

import numpy as np

from onnxjit.lowering import TENSOR, Bound, In, LowerContext, lowers, returns, tensor
from onnxjit.registry import onnx_op


def _as_str_array(ctx: Any, x: np.ndarray, what: str) -> np.ndarray:
    """``x`` as an object array of str (numpy 'U' arrays are converted; bytes are decoded)."""
    x = np.asarray(x)
    if x.dtype.kind == "U":
        return x.astype(object)
    if x.dtype != object:
        raise ctx.error(f"{what} must be a string tensor, got {x.dtype}; feed an array of str")
    if any(isinstance(s, bytes) for s in x.flat):
        out = np.empty(x.shape, dtype=object)
        out.flat[:] = [s.decode("utf-8") if isinstance(s, bytes) else s for s in x.flat]
        return out
    return x


def _str_list(values: Any) -> list[str]:
    """A STRINGS attribute as a list of str (bytes decoded as UTF-8)."""
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in (values or [])]


# ---------------------------------------------------------------------------------------------
# StringNormalizer
# ---------------------------------------------------------------------------------------------

# Languages whose case mapping differs from Unicode's default (locale-independent) mapping for
# the letters below: Turkish and Azerbaijani dotted/dotless i. Lithuanian (which keeps a dot
# above in some lowercase forms) is not supported.
_DOTTED_I_LANGS = ("tr", "az")
_UPPER_TR = str.maketrans({"i": "\u0130"})
_LOWER_TR = str.maketrans({"I": "\u0131", "\u0130": "i"})
# The C/POSIX locale (without a UTF-8 codeset) maps ASCII letters only.
_ASCII = "C"
_UPPER_ASCII = str.maketrans({chr(c): chr(c - 32) for c in range(ord("a"), ord("z") + 1)})
_LOWER_ASCII = str.maketrans({chr(c): chr(c + 32) for c in range(ord("A"), ord("Z") + 1)})


def _locale_language(ctx: Any, locale: str | None) -> str:
    """The language code of a locale name such as ``en_US``, ``tr-TR`` or ``de_DE.UTF-8``.

    Every locale is honoured with Unicode's default full case mapping (Python's ``str.upper``
    and ``str.lower``), which is what every locale except Turkish/Azerbaijani (dotted and
    dotless i, handled here) and Lithuanian (refused) prescribes. ``C`` and ``POSIX`` map
    ASCII letters only; ``C.UTF-8`` maps all of Unicode. (onnxruntime maps one code point at
    a time, so it leaves e.g. "ß" unchanged by UPPER where this gives "SS".)
    """
    if not locale:
        return "en"
    if locale in ("C", "POSIX"):
        return _ASCII
    lang = re.split(r"[_\-.@]", locale, maxsplit=1)[0].lower()
    if lang in ("c", "posix"):
        return "en"
    if not re.fullmatch(r"[a-z]{2,3}", lang):
        raise ctx.error(
            f"locale {locale!r} is not a locale name (expected e.g. 'en_US' or 'tr-TR')"
        )
    return lang


def _upper(s: str, lang: str) -> str:
    if lang == _ASCII:
        return s.translate(_UPPER_ASCII)
    return s.translate(_UPPER_TR).upper() if lang in _DOTTED_I_LANGS else s.upper()


def _lower(s: str, lang: str) -> str:
    if lang == _ASCII:
        return s.translate(_LOWER_ASCII)
    return s.translate(_LOWER_TR).lower() if lang in _DOTTED_I_LANGS else s.lower()


@onnx_op("StringNormalizer", since=10)
def string_normalizer_10(
    ctx: Any,
    x: np.ndarray,
    *,
    case_change_action: str,
    is_case_sensitive: int,
    locale: str | None = None,
    stopwords: list[str] | None = None,
) -> np.ndarray:
    """Drop the elements equal to a stopword, then change case.

    X is [C] or [1, C]. Stopwords are compared whole-element, case-insensitively (both sides
    lowercased under the locale) unless ``is_case_sensitive``. When every element is dropped
    the output is ``[""]`` with shape [1] (input [C]) or [1, 1] (input [1, C]).
    """
    x = _as_str_array(ctx, x, "X")
    if not (x.ndim == 1 or (x.ndim == 2 and x.shape[0] == 1)):
        raise ctx.error(f"X must have shape [C] or [1, C], got {list(x.shape)}")
    action = case_change_action.upper() if case_change_action else "NONE"
    if action not in ("NONE", "LOWER", "UPPER"):
        raise ctx.error(
            f"case_change_action must be NONE, LOWER or UPPER, got {case_change_action!r}"
        )
    lang = _locale_language(ctx, locale)
    if lang == "lt" and (action != "NONE" or (stopwords and not is_case_sensitive)):
        raise ctx.unsupported(
            f"locale {locale!r}: Lithuanian case mapping is not supported; use another locale"
        )
    items = list(x.reshape(-1))
    stops = _str_list(stopwords)
    if stops:
        if is_case_sensitive:
            stop_set = set(stops)
            items = [s for s in items if s not in stop_set]
        else:
            stop_set = {_lower(w, lang) for w in stops}
            items = [s for s in items if _lower(s, lang) not in stop_set]
    if action == "LOWER":
        items = [_lower(s, lang) for s in items]
    elif action == "UPPER":
        items = [_upper(s, lang) for s in items]
    if not items:
        items = [""]
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(1, -1) if x.ndim == 2 else out


# ---------------------------------------------------------------------------------------------
# StringConcat, StringSplit
# ---------------------------------------------------------------------------------------------


@onnx_op("StringConcat", since=20)
def string_concat_20(ctx: Any, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Elementwise ``x + y`` with numpy broadcasting."""
    x = _as_str_array(ctx, x, "X")
    y = _as_str_array(ctx, y, "Y")
    try:
        shape = np.broadcast_shapes(x.shape, y.shape)
    except ValueError:
        raise ctx.error(
            f"X {list(x.shape)} and Y {list(y.shape)} do not broadcast; fix the shapes"
        ) from None
    out = np.empty(shape, dtype=object)
    # np.add on object arrays calls str.__add__ per element, in one broadcasting pass.
    np.add(x, y, out=out)
    return out


@onnx_op("StringSplit", since=20)
def string_split_20(
    ctx: Any, x: np.ndarray, *, delimiter: str | None = None, maxsplit: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Split every element; Y is X.shape + [most pieces] padded with "", Z the piece counts.

    No or an empty delimiter splits on runs of whitespace and drops leading/trailing
    whitespace (so "" gives no pieces); otherwise every delimiter occurrence splits (so ""
    gives one empty piece). At most ``maxsplit`` splits are made from the left when it is set
    and not negative.
    """
    x = _as_str_array(ctx, x, "X")
    sep = delimiter or None
    limit = -1 if maxsplit is None or maxsplit < 0 else int(maxsplit)
    pieces = [s.split(sep, limit) for s in x.reshape(-1)]
    counts = np.array([len(p) for p in pieces], dtype=np.int64).reshape(x.shape)
    width = max((len(p) for p in pieces), default=0)
    y = np.full((len(pieces), width), "", dtype=object)
    for i, p in enumerate(pieces):
        y[i, : len(p)] = p
    return y.reshape(*x.shape, width), counts


# ---------------------------------------------------------------------------------------------
# RegexFullMatch
# ---------------------------------------------------------------------------------------------

_W = "0-9A-Za-z_"
# RE2's Perl classes are ASCII-only; Python's are Unicode on str patterns.
_PERL_IN_CLASS = {"d": "0-9", "w": _W, "s": "\\t\\n\\f\\r "}
_PERL = {
    "d": "[0-9]",
    "D": "[^0-9]",
    "w": f"[{_W}]",
    "W": f"[^{_W}]",
    "s": "[\\t\\n\\f\\r ]",
    "S": "[^\\t\\n\\f\\r ]",
    "b": f"(?:(?<=[{_W}])(?![{_W}])|(?<![{_W}])(?=[{_W}]))",
    "B": f"(?:(?<=[{_W}])(?=[{_W}])|(?<![{_W}])(?![{_W}]))",
    "A": "\\A",
    "z": "\\Z",
}
_POSIX = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7f",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": _W,
    "xdigit": "0-9A-Fa-f",
}
# Escapes that mean the same single character in RE2 and Python.
_SAME_ESCAPES = set("afnrtv")
# Unicode general categories as class bodies (code point ranges), built on first use.
_CATEGORY_RANGES: dict[str, str] = {}
_CATEGORY_LOCK = threading.Lock()
_REGEX_CACHE: dict[str, re.Pattern[str]] = {}
_REGEX_LOCK = threading.Lock()


class _RE2Error(ValueError):
    """The pattern is not valid RE2."""


class _RE2Unsupported(_RE2Error):
    """Valid RE2 that onnxjit cannot express with Python's re."""


# RE2 refuses counted repetitions above 1000.
_RE2_MAX_REPEAT = 1000


def _category_body(name: str) -> str | None:
    """The class body (``\\Uxxxxxxxx-\\Uyyyyyyyy`` ranges) of a Unicode general category
    (``L``, ``Lu``, ...) or ``Any``, from Python's unicodedata; None for other names."""
    if name == "Any":
        return "\\U00000000-\\U0010ffff"
    with _CATEGORY_LOCK:
        if not _CATEGORY_RANGES:
            ranges: dict[str, list[list[int]]] = {}
            for cp in range(sys.maxunicode + 1):
                cat = unicodedata.category(chr(cp))
                if cat == "Cn":
                    continue  # unassigned: in no RE2 category
                for key in (cat, cat[0]):
                    rs = ranges.setdefault(key, [])
                    if rs and rs[-1][1] == cp - 1:
                        rs[-1][1] = cp
                    else:
                        rs.append([cp, cp])
            for key, rs in ranges.items():
                _CATEGORY_RANGES[key] = "".join(
                    f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in rs
                )
    return _CATEGORY_RANGES.get(name)


def _unicode_class(p: str, i: int, in_class: bool) -> tuple[str, int]:
    """Translate ``\\pX``, ``\\p{Name}``, ``\\PX``, ``\\p{^Name}`` at ``p[i]``."""
    negate = p[i + 1] == "P"
    if i + 2 >= len(p):
        raise _RE2Error("missing Unicode class name after \\p")
    if p[i + 2] == "{":
        end = p.find("}", i + 3)
        if end < 0:
            raise _RE2Error("unterminated \\p{...}")
        name, nxt = p[i + 3 : end], end + 1
    else:
        name, nxt = p[i + 2], i + 3
    if name.startswith("^"):
        negate, name = not negate, name[1:]
    body = _category_body(name)
    if body is None:
        raise _RE2Unsupported(
            f"Unicode class {name!r} is not supported (general categories such as L, Lu, N "
            "and Any are; scripts are not)"
        )
    if in_class:
        if negate:
            raise _RE2Unsupported("a negated Unicode class inside [...] is not supported")
        return body, nxt
    return ("[^" if negate else "[") + body + "]", nxt


def _escape_at(p: str, i: int, in_class: bool) -> tuple[str, int]:
    """Translate the escape starting at ``p[i] == '\\'``; returns (python text, next index)."""
    if i + 1 >= len(p):
        raise _RE2Error("trailing backslash")
    c = p[i + 1]
    if c == "x":
        if i + 2 < len(p) and p[i + 2] == "{":
            end = p.find("}", i + 3)
            if end < 0:
                raise _RE2Error("unterminated \\x{...}")
            code = int(p[i + 3 : end], 16)
            return re.escape(chr(code)), end + 1
        hexd = p[i + 2 : i + 4]
        if len(hexd) != 2 or not all(h in "0123456789abcdefABCDEF" for h in hexd):
            raise _RE2Error("\\x needs two hex digits")
        return p[i : i + 4], i + 4
    if c.isdigit():
        j = i + 1
        while j < len(p) and j < i + 4 and p[j] in "01234567":
            j += 1
        digits = p[i + 1 : j]
        if c == "0" or len(digits) == 3:
            # Octal: \0, \0NN or \NNN mean the same in both.
            return re.escape(chr(int(digits, 8))), j
        raise _RE2Error(f"backreference \\{c} is not RE2 syntax")
    if in_class:
        if c in _PERL_IN_CLASS:
            return _PERL_IN_CLASS[c], i + 2
        if c in "DWS":
            raise _RE2Unsupported(f"negated class \\{c} inside [...] is not supported")
    elif c in _PERL:
        return _PERL[c], i + 2
    if c in _SAME_ESCAPES:
        return p[i : i + 2], i + 2
    if c in ("p", "P"):
        return _unicode_class(p, i, in_class)
    if c == "Q":
        end = p.find("\\E", i + 2)
        lit = p[i + 2 :] if end < 0 else p[i + 2 : end]
        return re.escape(lit), (len(p) if end < 0 else end + 2)
    if c.isascii() and c.isalnum():
        raise _RE2Error(f"escape \\{c} is not RE2 syntax")
    return re.escape(c), i + 2


def _translate_re2(p: str) -> str:
    """Python ``re`` source with the meaning of the RE2 pattern ``p`` (or _RE2Error)."""
    out: list[str] = []
    i = 0
    n = len(p)
    multiline = bool(re.search(r"\(\?[a-zA-Z]*m", p))
    while i < n:
        c = p[i]
        if c == "\\":
            s, i = _escape_at(p, i, False)
            out.append(s)
        elif c == "[":
            j = i + 1
            parts = ["["]
            if j < n and p[j] == "^":
                parts.append("^")
                j += 1
            if j < n and p[j] == "]":
                parts.append("\\]")
                j += 1
            while True:
                if j >= n:
                    raise _RE2Error("missing ]")
                d = p[j]
                if d == "]":
                    parts.append("]")
                    j += 1
                    break
                if d == "\\":
                    s, j = _escape_at(p, j, True)
                    parts.append(s)
                elif d == "[" and p.startswith("[:", j):
                    end = p.find(":]", j + 2)
                    name = p[j + 2 : end] if end > 0 else ""
                    if name.startswith("^"):
                        raise _RE2Unsupported(f"negated POSIX class [:{name}:] is not supported")
                    if name not in _POSIX:
                        raise _RE2Error(f"unknown POSIX class [:{name}:]")
                    parts.append(_POSIX[name])
                    j = end + 2
                elif d in "[&~|":
                    # Literal in RE2; Python reserves these for future set syntax.
                    parts.append("\\" + d)
                    j += 1
                else:
                    parts.append(d)
                    j += 1
            out.append("".join(parts))
            i = j
        elif c == "(":
            if p.startswith("(?", i):
                rest = p[i + 2 : i + 4]
                if rest[:1] in ("=", "!") or rest in ("<=", "<!"):
                    raise _RE2Error("lookaround assertions are not RE2 syntax")
                if rest[:1] in (">", "(", "#") or p.startswith("(?P=", i):
                    raise _RE2Error(f"'(?{rest[:1]}' is not RE2 syntax")
                if rest[:1] == "<":
                    out.append("(?P<")
                    i += 3
                    continue
                if rest[:1] != "P" and rest[:1] != ":":
                    m = re.match(r"\(\?([a-zA-Z\-]*)([:)])", p[i:])
                    if not m or set(m.group(1)) - set("imsU-"):
                        raise _RE2Error("unknown group flag")
                    if "U" in m.group(1):
                        raise _RE2Unsupported("the U (ungreedy) flag is not supported")
                    if m.group(2) == ")" and i != 0:
                        raise _RE2Unsupported(
                            "flags set mid-pattern are not supported by onnxjit; use a "
                            "(?flags:...) group or put them at the start"
                        )
            out.append(c)
            i += 1
        elif c == "{":
            rep = re.match(r"\{(\d+)(?:,(\d*))?\}", p[i:])
            if p.startswith("{,", i):
                # A literal in RE2; Python would read {,n} as {0,n}.
                out.append("\\{")
            elif rep and max(int(v) for v in rep.groups() if v) > _RE2_MAX_REPEAT:
                raise _RE2Error(f"repetition count above {_RE2_MAX_REPEAT} in {rep.group(0)}")
            else:
                out.append(c)
            i += 1
        elif c in "*+?}" and i + 1 < n and p[i + 1] == "+":
            raise _RE2Error("possessive quantifiers are not RE2 syntax")
        elif c == "$" and not multiline:
            # RE2's $ is the end of the text; Python's also matches before a final newline.
            out.append("\\Z")
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _compile_re2(ctx: Any, pattern: str) -> re.Pattern[str]:
    with _REGEX_LOCK:
        hit = _REGEX_CACHE.get(pattern)
    if hit is not None:
        return hit
    try:
        compiled = re.compile(_translate_re2(pattern))
    except _RE2Unsupported as e:
        raise ctx.unsupported(
            f"pattern {pattern!r} uses RE2 syntax that onnxjit cannot run with Python's re: "
            f"{e}; rewrite the pattern without it"
        ) from None
    except (_RE2Error, re.error, ValueError, OverflowError) as e:
        raise ctx.error(
            f"pattern {pattern!r} is not RE2 syntax that onnxjit supports ({e}); rewrite it "
            "with RE2 syntax (no lookarounds, backreferences or possessive quantifiers)"
        ) from None
    with _REGEX_LOCK:
        if len(_REGEX_CACHE) > 256:
            _REGEX_CACHE.clear()
        _REGEX_CACHE[pattern] = compiled
    return compiled


@onnx_op("RegexFullMatch", since=20)
def regex_full_match_20(ctx: Any, x: np.ndarray, *, pattern: str | None = None) -> np.ndarray:
    """True where the whole element matches ``pattern`` (RE2 syntax).

    RE2 is run with Python's ``re`` after a translation that keeps RE2's meaning: ``\\d \\w
    \\s \\b \\B`` and POSIX classes ``[[:alpha:]]`` are ASCII as in RE2, ``$`` is the end of
    the text, ``\\z``, ``\\Q...\\E``, ``\\x{...}`` and ``(?<name>...)`` are rewritten; flags
    i, m, s are passed through; Unicode general categories (``\\pL``, ``\\p{Lu}``,
    ``\\PN``, ``\\p{^L}``, ``\\p{Any}``) become code point classes from Python's
    unicodedata. Constructs that RE2 rejects (lookarounds, backreferences, possessive
    quantifiers, atomic groups) and RE2 features Python lacks (Unicode script classes such
    as ``\\p{Greek}``, the U flag, negated Perl, POSIX or Unicode classes inside [...], flags
    set mid-pattern) are refused with an error naming the node (UnsupportedOperatorError for
    the latter). RE2's limit of 1000 on counted repetitions is kept.
    """
    x = _as_str_array(ctx, x, "X")
    if pattern is None:
        raise ctx.error("the pattern attribute is required; set it to an RE2 regular expression")
    rx = _compile_re2(ctx, pattern)
    out = np.fromiter((rx.fullmatch(s) is not None for s in x.reshape(-1)), bool, x.size)
    return out.reshape(x.shape)


# ---------------------------------------------------------------------------------------------
# TfIdfVectorizer
# ---------------------------------------------------------------------------------------------


class _NgramTable:
    """The pool as a trie in flat arrays (see kernels/cpu/text.py) plus what the op needs."""

    def __init__(
        self,
        child_start: np.ndarray,
        child_key: np.ndarray,
        child_node: np.ndarray,
        node_col: np.ndarray,
        columns: np.ndarray,
        vocab: dict[str, int] | None,
    ) -> None:
        self.child_start = child_start
        self.child_key = child_key
        self.child_node = child_node
        self.node_col = node_col
        self.columns = columns  # output column of each pool n-gram (ngram_indexes)
        self.n_out = int(columns.max()) + 1 if columns.size else 0
        self.vocab = vocab


def _build_table(
    ctx: Any,
    ngram_counts: list[int],
    ngram_indexes: list[int],
    pool_int64s: list[int] | None,
    pool_strings: list[str] | None,
) -> _NgramTable:
    vocab: dict[str, int] | None = None
    if pool_strings:
        if pool_int64s:
            raise ctx.error("set only one of pool_int64s and pool_strings")
        strings = _str_list(pool_strings)
        vocab = {}
        for s in strings:
            vocab.setdefault(s, len(vocab))
        pool = [vocab[s] for s in strings]
    else:
        pool = [int(v) for v in (pool_int64s or [])]
    starts = [int(v) for v in ngram_counts]
    indexes = [int(v) for v in ngram_indexes]
    if any(v < 0 for v in indexes):
        raise ctx.error(f"ngram_indexes must not be negative, got {indexes}")
    bounds = starts + [len(pool)]
    grams: list[tuple[int, ...]] = []
    for k in range(len(starts)):
        lo, hi, size = bounds[k], bounds[k + 1], k + 1
        if not 0 <= lo <= hi <= len(pool) or (hi - lo) % size:
            raise ctx.error(
                f"ngram_counts {starts} does not split a pool of {len(pool)} items into "
                f"groups of 1-grams, 2-grams, ...; fix ngram_counts"
            )
        grams.extend(tuple(pool[j : j + size]) for j in range(lo, hi, size))
    if len(grams) != len(indexes):
        raise ctx.error(
            f"the pool holds {len(grams)} n-grams but ngram_indexes has {len(indexes)} "
            "entries; they must be equal"
        )
    # Trie as nested dicts, then flattened breadth-first with sorted children.
    root: dict[int, Any] = {}
    cols: dict[int, int] = {}
    nodes: list[dict[int, Any]] = [root]
    for gram, col in zip(grams, indexes):
        node = root
        for tok in gram:
            if tok not in node:
                child: dict[int, Any] = {}
                node[tok] = child
                nodes.append(child)
            node = node[tok]
        cols[id(node)] = col
    number = {id(root): 0}
    order = [root]
    child_start = [0]
    child_key: list[int] = []
    child_node: list[int] = []
    k = 0
    while k < len(order):
        node = order[k]
        for tok in sorted(node):
            child = node[tok]
            number[id(child)] = len(order)
            order.append(child)
            child_key.append(tok)
            child_node.append(number[id(child)])
        child_start.append(len(child_key))
        k += 1
    node_col = np.full(len(order), -1, dtype=np.int64)
    for j, node in enumerate(order):
        node_col[j] = cols.get(id(node), -1)
    return _NgramTable(
        np.asarray(child_start, dtype=np.int64),
        np.asarray(child_key, dtype=np.int64),
        np.asarray(child_node, dtype=np.int64),
        node_col,
        np.asarray(indexes, dtype=np.int64),
        vocab,
    )


@onnx_op("TfIdfVectorizer", since=9)
def tfidf_vectorizer_9(
    ctx: Any,
    x: np.ndarray,
    *,
    max_gram_length: int | None = None,
    max_skip_count: int | None = None,
    min_gram_length: int | None = None,
    mode: str | None = None,
    ngram_counts: list[int] | None = None,
    ngram_indexes: list[int] | None = None,
    pool_int64s: list[int] | None = None,
    pool_strings: list[str] | None = None,
    weights: list[float] | None = None,
) -> np.ndarray:
    """n-gram counts of X ([C] or [N, C]; int32, int64 or string) against the pool.

    Output [max(ngram_indexes) + 1] or [N, that], float32. An n-gram of length n >= 2 is
    counted once per gap 0..max_skip_count between its items; unigrams once. Only lengths in
    [min_gram_length, max_gram_length] count. mode TF: the counts; IDF: weights (or 1) where
    the count is positive; TFIDF: counts times weights. ``weights[k]`` is the weight of the
    k-th pool n-gram, applied to its column ``ngram_indexes[k]`` (as the spec and onnxruntime
    say; the reference evaluator indexes weights by output column, which agrees when
    ngram_indexes is 0, 1, 2, ...).
    """
    _check_tfidf(ctx, max_gram_length, max_skip_count, min_gram_length, mode, ngram_counts,
                 ngram_indexes)  # fmt: skip
    table = _build_table(ctx, ngram_counts, ngram_indexes, pool_int64s, pool_strings)
    return _tfidf(ctx, x, table, min_gram_length, max_gram_length, max_skip_count, mode, weights)


def _check_tfidf(ctx, max_gram_length, max_skip_count, min_gram_length, mode, ngram_counts,
                 ngram_indexes) -> None:  # fmt: skip
    for name, value in (
        ("max_gram_length", max_gram_length),
        ("max_skip_count", max_skip_count),
        ("min_gram_length", min_gram_length),
        ("mode", mode),
        ("ngram_counts", ngram_counts),
        ("ngram_indexes", ngram_indexes),
    ):
        if value is None:
            raise ctx.error(f"attribute {name} is required")
    if mode not in ("TF", "IDF", "TFIDF"):
        raise ctx.error(f"mode must be TF, IDF or TFIDF, got {mode!r}")
    if min_gram_length < 1 or max_gram_length < min_gram_length or max_skip_count < 0:
        raise ctx.error(
            "need 1 <= min_gram_length <= max_gram_length and max_skip_count >= 0, got "
            f"{min_gram_length}, {max_gram_length}, {max_skip_count}"
        )


def _tfidf(
    ctx: Any,
    x: np.ndarray,
    table: _NgramTable,
    min_gram_length: int,
    max_gram_length: int,
    max_skip_count: int,
    mode: str,
    weights: list[float] | None,
) -> np.ndarray:
    """TfIdfVectorizer of ``x`` against the pool's ``table`` (attributes checked)."""
    x = np.asarray(x)
    if x.ndim > 2:
        raise ctx.error(f"X must have shape [C] or [N, C], got {list(x.shape)}")
    rows = x.reshape(1, -1) if x.ndim < 2 else x
    if x.dtype == object or x.dtype.kind == "U":
        if table.vocab is None:
            raise ctx.error("X is a string tensor but the node has no pool_strings")
        vocab = table.vocab
        # Dictionary lookups of Python str: a host loop; unknown tokens become -1, which no
        # pool entry uses.
        flat = [vocab.get(s.decode() if isinstance(s, bytes) else s, -1) for s in rows.flat]
        tokens = np.array(flat, dtype=np.int64).reshape(rows.shape)
    elif x.dtype in (np.int32, np.int64):
        if table.vocab is not None:
            raise ctx.error(f"X is {x.dtype} but the node has a string pool (pool_strings)")
        tokens = np.ascontiguousarray(rows, dtype=np.int64)
    else:
        raise ctx.error(f"X must be int32, int64 or string, got {x.dtype}")
    counts = np.zeros((rows.shape[0], table.n_out), dtype=np.float32)
    if tokens.size and table.child_key.size:
        args = (
            tokens,
            table.child_start,
            table.child_key,
            table.child_node,
            table.node_col,
            int(min_gram_length),
            int(max_gram_length),
            int(max_skip_count),
            counts,
        )
        # threads split the rows: one row has nothing to split
        work = tokens.size * (max_skip_count + 1) if tokens.shape[0] > 1 else 0
        ctx.run_kernel("text", "ngram_counts", work, *args)
    if mode != "TF":
        w = None
        if weights:
            # weights[k] belongs to the k-th pool n-gram (spec, onnxruntime), so it scales
            # that n-gram's column ngram_indexes[k].
            if len(weights) != table.columns.shape[0]:
                raise ctx.error(
                    f"weights has {len(weights)} entries; it needs one per pool n-gram "
                    f"({table.columns.shape[0]}, the length of ngram_indexes)"
                )
            w = np.zeros(table.n_out, dtype=np.float32)
            w[table.columns] = np.asarray(weights, dtype=np.float32)
        if mode == "IDF":
            counts = (counts > 0).astype(np.float32)
            if w is not None:
                counts *= w
        elif mode == "TFIDF" and w is not None:
            counts *= w
    return counts if x.ndim == 2 else counts.reshape(-1)


@lowers(tfidf_vectorizer_9)
def _lower_tfidf(lc: LowerContext) -> Bound | None:
    """TfIdfVectorizer with valid attributes: the pool's trie built once for the plan (the
    implementation builds it at every call). Invalid attributes or inputs leave the node to
    the implementation, which raises the error."""
    x = lc.inputs[0]
    if x is None or x.kind != TENSOR or x.ndim > 2:
        return None
    a = lc.attrs
    keys = ("max_gram_length", "max_skip_count", "min_gram_length", "mode", "ngram_counts",
            "ngram_indexes")  # fmt: skip
    try:
        _check_tfidf(lc, *(a[k] for k in keys))
        table = _build_table(lc, a["ngram_counts"], a["ngram_indexes"], a["pool_int64s"],
                             a["pool_strings"])  # fmt: skip
    except Exception:
        return None
    strings = x.dtype == object or x.dtype.kind == "U"
    if strings != (table.vocab is not None) or not (strings or x.dtype in (np.int32, np.int64)):
        return None
    weights = a["weights"]
    if a["mode"] != "TF" and weights and len(weights) != table.columns.shape[0]:
        return None
    n = x.shape[0] if x.ndim == 2 else None
    shape = (n, table.n_out) if n is not None else (table.n_out,)
    ctx = lc.ctx
    lo, hi, skip, mode = a["min_gram_length"], a["max_gram_length"], a["max_skip_count"], a["mode"]

    def tfidf(x: np.ndarray) -> np.ndarray:
        return _tfidf(ctx, x, table, lo, hi, skip, mode, weights)

    return returns(tfidf, In(0), outs=[tensor(np.float32, shape)], name="text.tfidf")
