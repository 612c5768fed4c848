"""String operators (StringNormalizer, StringConcat, StringSplit, RegexFullMatch,
TfIdfVectorizer) against the ONNX reference evaluator, or onnxruntime where the reference is
wrong (said per test).
"""

from __future__ import annotations

import numpy as np
import pytest
from oracle import (
    assert_close,
    declare_outputs_like,
    make_node_model,
    ort_outputs,
    reference_outputs,
)

import onnxjit


def S(*items: str) -> np.ndarray:
    """A 1-D string tensor (object array of str)."""
    out = np.empty(len(items), dtype=object)
    out[:] = list(items)
    return out


def S2(rows: list[list[str]]) -> np.ndarray:
    out = np.empty((len(rows), len(rows[0]) if rows else 0), dtype=object)
    for i, r in enumerate(rows):
        out[i, :] = r
    return out


def check_node(
    op: str,
    inputs: dict,
    attrs: dict | None = None,
    opset: int = 20,
    n_outputs: int = 1,
    oracle: str = "ref",
    rtol: float = 1e-5,
) -> None:
    """oracle.check_node, except that an oracle's numpy str ('U') output is compared as the
    object array of str that ONNX string tensors are (the reference evaluator returns 'U'
    arrays for some 0-d string results)."""
    model = make_node_model(op, inputs, attrs, opset, n_outputs=n_outputs)
    want = reference_outputs(model, inputs) if oracle == "ref" else ort_outputs(model, inputs)
    want = [
        w.astype(object) if isinstance(w, np.ndarray) and w.dtype.kind == "U" else w for w in want
    ]
    declare_outputs_like(model, want)
    got = onnxjit.InferenceSession(model.SerializeToString()).run(None, inputs)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, rtol, 1e-6, f"{op}-{opset} output {i}")


def _run(op: str, inputs: dict, attrs: dict, opset: int, like: np.ndarray | None = None) -> list:
    """Run one node in onnxjit alone (for errors and hand-checked values); ``like`` declares
    the output's type and rank where shape inference leaves it open."""
    model = make_node_model(op, inputs, attrs, opset)
    if like is not None:
        declare_outputs_like(model, [like])
    return onnxjit.InferenceSession(model.SerializeToString()).run(None, inputs)


# ------------------------------------------------------------------------------ StringConcat

CONCAT_CASES = {
    "same_shape": (S("abc", "def"), S(".com", ".net")),
    "broadcast_2d": (S2([["a", "b", "c"], ["d", "e", "f"]]), S("1", "2", "3")),
    "broadcast_col": (S2([["x"], ["y"]]), S("1", "2", "3")),
    "scalar": (np.array("cat", dtype=object), np.array("s", dtype=object)),
    "scalar_with_vector": (np.array("pre-", dtype=object), S("a", "", "c")),
    "empty": (np.empty((0,), dtype=object), S("s")),
    "empty_2d": (np.empty((2, 0), dtype=object), np.empty((1, 0), dtype=object)),
    "utf8_and_empty_strings": (S("的", "", "é"), S("中", "", "\U0001f600")),
}


@pytest.mark.parametrize("case", sorted(CONCAT_CASES))
def test_string_concat_20(case: str) -> None:
    x, y = CONCAT_CASES[case]
    check_node("StringConcat", {"x": x, "y": y}, opset=20)


def test_string_concat_bad_broadcast() -> None:
    with pytest.raises(onnxjit.OnnxJitError):
        _run("StringConcat", {"x": S("a", "b"), "y": S("a", "b", "c")}, {}, 20)


# ------------------------------------------------------------------------------- StringSplit

SPLIT_INPUT = S("a,b,,c", "", ",", "no delimiter here", "  spaced   out  ", "x,y")
SPLIT_CASES = {
    "comma": (SPLIT_INPUT, {"delimiter": ","}),
    "comma_maxsplit1": (SPLIT_INPUT, {"delimiter": ",", "maxsplit": 1}),
    "comma_maxsplit0": (SPLIT_INPUT, {"delimiter": ",", "maxsplit": 0}),
    "whitespace_default": (SPLIT_INPUT, {}),
    "whitespace_empty_delimiter": (SPLIT_INPUT, {"delimiter": ""}),
    "whitespace_maxsplit": (SPLIT_INPUT, {"maxsplit": 1}),
    "multichar_delimiter": (S("a::b::c", "::", "a:b"), {"delimiter": "::"}),
    "2d": (S2([["hello world", "def.net"], ["o n n x", "a b c d e"]]), {"maxsplit": 2}),
    "scalar": (np.array("1 2 3", dtype=object), {}),
    "empty_1d": (np.empty((0,), dtype=object), {"delimiter": ","}),
    "empty_2d": (np.empty((3, 0), dtype=object), {}),
    "only_empty_strings": (S("", ""), {}),
    "utf8": (S("的-中-é", "\U0001f600"), {"delimiter": "-"}),
}


@pytest.mark.parametrize("case", sorted(SPLIT_CASES))
def test_string_split_20(case: str) -> None:
    x, attrs = SPLIT_CASES[case]
    # The reference evaluator fails on 0-d inputs (its padding helper expects arrays).
    oracle = "ort" if x.ndim == 0 else "ref"
    check_node("StringSplit", {"x": x}, attrs=attrs, opset=20, n_outputs=2, oracle=oracle)


# ---------------------------------------------------------------------------- RegexFullMatch

REGEX_INPUT = S(
    "www.google.com",
    "www.bbc.co.uk",
    "account@gmail.com",
    "abc123",
    "ABC",
    "",
    "a.b",
    "tab\there",
)
REGEX_REF_CASES = {
    "domain": r"www\.[\w.-]+\.\bcom\b",
    "email": r"(\W|^)[\w.\-]{0,25}@(yahoo|gmail)\.com(\W|$)",
    "alternation": r"abc\d+|ABC",
    "class_negated": r"[^@]*",
    "ignorecase_flag": r"(?i)abc\d*",
    "ignorecase_group": r"(?i:abc)\d*",
    "anchors": r"^a.b$",
    "empty_pattern": r"",
    "repetition": r"[a-z]{2,3}\d{3}",
    "named_group": r"(?P<user>\w+)@(?P<host>[\w.]+)",
    "whitespace": r"\S+\s\S+",
    "escapes": r"\x61\.b",
}


@pytest.mark.parametrize("case", sorted(REGEX_REF_CASES))
def test_regex_full_match_20(case: str) -> None:
    # ASCII inputs: Python's re (the reference evaluator) and RE2 agree on these patterns.
    check_node("RegexFullMatch", {"x": REGEX_INPUT}, {"pattern": REGEX_REF_CASES[case]}, 20)


def test_regex_full_match_20_2d_and_empty() -> None:
    x = S2([["account@gmail.com", "account@hotmail.com"], ["not email", "a@yahoo.com"]])
    check_node("RegexFullMatch", {"x": x}, {"pattern": r"[\w.]+@(yahoo|gmail)\.com"}, 20)
    empty = np.empty((2, 0), dtype=object)
    check_node("RegexFullMatch", {"x": empty}, {"pattern": r"a+"}, 20)
    check_node("RegexFullMatch", {"x": np.array("aaa", dtype=object)}, {"pattern": "a+"}, 20)


# Where RE2 and Python's re differ (Perl classes are ASCII in RE2, $ is the end of the text,
# POSIX classes, \Q...\E, \z, \x{...}, (?<name>...)): the reference evaluator runs Python's re
# unchanged, so onnxruntime (which runs RE2) is the oracle.
RE2_INPUT = S(
    "café", "cafe", "a1", "١٢٣", "a\n", "a", "x.y", "b\u00a0c", "b c", "A_9", "é", "Ωμέγα", "½€"
)
RE2_CASES = {
    "word_is_ascii": r"\w+",
    "digit_is_ascii": r"\d+",
    "space_is_ascii": r"b\sc",
    "boundary_is_ascii": r".*\b.*",
    "not_boundary": r"caf\B.",
    "dollar_is_end_of_text": r"(a$)\n?",
    "posix_classes": r"[[:alpha:]]+[[:digit:]]*",
    "posix_word": r"[[:word:]]+",
    "quoted_literal": r"\Qx.y\E",
    "end_of_text": r"a\z",
    "hex_braces": r"\x{e9}",
    "named_group_angle": r"(?<w>[a-z]+)",
    "ignorecase_unicode": r"(?i)CAFÉ",
    "class_with_perl": r"[\w.]+",
    "dot_no_newline": r"a.",
    "dotall": r"(?s)a.",
    "unicode_letters": r"\pL+",
    "unicode_category_braces": r"\p{Lu}\p{Ll}*",
    "unicode_negated": r"\PN+",
    "unicode_caret_negated": r"\p{^L}+",
    "unicode_in_class": r"[\pN\p{Sc}\d]+",
    "unicode_any": r"\p{Any}*",
}


@pytest.mark.parametrize("case", sorted(RE2_CASES))
def test_regex_full_match_20_re2_semantics(case: str) -> None:
    check_node("RegexFullMatch", {"x": RE2_INPUT}, {"pattern": RE2_CASES[case]}, 20, oracle="ort")


@pytest.mark.parametrize(
    "pattern",
    [r"(?=a)a", r"(?!b)a", r"(?<=a)b", r"(a)\1", r"a++", r"(?>a)", r"(?P=x)", "(a", "a{1001}"],
)
def test_regex_full_match_20_rejects_non_re2(pattern: str) -> None:
    with pytest.raises(onnxjit.InvalidArgumentError, match="RE2"):
        _run("RegexFullMatch", {"x": S("a")}, {"pattern": pattern}, 20)


@pytest.mark.parametrize(
    "pattern", [r"\p{Greek}", r"[\PN]", r"(?U)a+", r"a(?i)b", r"[\W]", r"[[:^alpha:]]"]
)
def test_regex_full_match_20_refuses_re2_it_cannot_translate(pattern: str) -> None:
    with pytest.raises(onnxjit.UnsupportedOperatorError, match="RE2 syntax"):
        _run("RegexFullMatch", {"x": S("a")}, {"pattern": pattern}, 20)


# -------------------------------------------------------------------------- StringNormalizer

# The reference evaluator's StringNormalizer strips accents and removes stopwords inside
# space-separated words, which the spec does not say (it drops whole elements equal to a
# stopword); onnxruntime follows the spec, so it is the oracle.
# onnxruntime builds a C++ std::locale from the locale attribute (default en_US.UTF-8, which
# this machine lacks), so the cases name C.UTF-8. It maps case one code point at a time,
# where onnxjit uses Python's full Unicode mapping (e.g. "ß".upper() == "SS"): the inputs
# avoid the letters whose full and simple mappings differ.
WEEK = S("Monday", "tuesday", "MONDAY", "Wednesday", "monday", "École", "")
NORM_CASES = {
    "nochange": (WEEK, {}),
    "lower": (WEEK, {"case_change_action": "LOWER"}),
    "upper": (WEEK, {"case_change_action": "UPPER"}),
    "stop_sensitive": (WEEK, {"stopwords": ["monday"], "is_case_sensitive": 1}),
    "stop_insensitive_upper": (
        WEEK,
        {"stopwords": ["monday"], "case_change_action": "UPPER"},
    ),
    "stop_insensitive_lower_locale": (
        WEEK,
        {"stopwords": ["MONDAY", "x"], "case_change_action": "LOWER", "locale": "C.UTF-8"},
    ),
    "two_dim": (
        WEEK.reshape(1, -1),
        {"stopwords": ["monday"], "case_change_action": "UPPER"},
    ),
    "all_dropped_1d": (S("monday", "Monday"), {"stopwords": ["monday"]}),
    "all_dropped_2d": (S("monday", "Monday").reshape(1, 2), {"stopwords": ["MONDAY"]}),
    "single": (S("Hello"), {"case_change_action": "LOWER"}),
    # The C/POSIX locale maps only ASCII letters.
    "c_locale_ascii_only": (WEEK, {"case_change_action": "LOWER", "locale": "C"}),
    "posix_locale_ascii_only": (WEEK, {"case_change_action": "UPPER", "locale": "POSIX"}),
}


@pytest.mark.parametrize("case", sorted(NORM_CASES))
def test_string_normalizer_10(case: str) -> None:
    x, attrs = NORM_CASES[case]
    attrs = {"locale": "C.UTF-8", **attrs}
    check_node("StringNormalizer", {"x": x}, attrs=attrs, opset=10, oracle="ort")


def test_string_normalizer_10_turkish_locale() -> None:
    # Turkish case mapping (dotted capital I, dotless small i), from the Unicode
    # SpecialCasing rules for tr; onnxruntime needs the OS locale installed, so the expected
    # strings are written out.
    upper = _run(
        "StringNormalizer",
        {"x": S("istanbul", "Irmak")},
        {"locale": "tr_TR", "case_change_action": "UPPER"},
        10,
    )[0]
    assert list(upper) == ["\u0130STANBUL", "IRMAK"]
    lower = _run(
        "StringNormalizer",
        {"x": S("\u0130STANBUL", "IRMAK")},
        {"locale": "tr-TR", "case_change_action": "LOWER"},
        10,
    )[0]
    assert list(lower) == ["istanbul", "\u0131rmak"]


def test_string_normalizer_10_rejects_bad_shapes_and_actions() -> None:
    with pytest.raises(onnxjit.InvalidArgumentError, match=r"\[C\]"):
        _run("StringNormalizer", {"x": S2([["a", "b"], ["c", "d"]])}, {}, 10, like=S2([["a"]]))
    with pytest.raises(onnxjit.OnnxJitError):
        _run("StringNormalizer", {"x": S("a")}, {"case_change_action": "TITLE"}, 10)


# --------------------------------------------------------------------------- TfIdfVectorizer

POOL_INT = [2, 3, 5, 4, 5, 6, 7, 8, 6, 7]  # unigrams 2 3 5 4; bigrams (5,6) (7,8) (6,7)
SEQ = [1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8]


def _tfidf_attrs(mode: str, lo: int, hi: int, skip: int, **kw) -> dict:
    attrs = {
        "mode": mode,
        "min_gram_length": lo,
        "max_gram_length": hi,
        "max_skip_count": skip,
        "ngram_counts": [0, 4],
        "ngram_indexes": [0, 1, 2, 3, 4, 5, 6],
        "pool_int64s": POOL_INT,
    }
    attrs.update(kw)
    return attrs


TFIDF_CASES = {
    "tf_bigrams_skip0": (np.array(SEQ, np.int32), _tfidf_attrs("TF", 2, 2, 0)),
    "tf_bigrams_skip5": (np.array(SEQ, np.int64), _tfidf_attrs("TF", 2, 2, 5)),
    "tf_uni_bi_skip5_batch": (
        np.array(SEQ, np.int32).reshape(2, 6),
        _tfidf_attrs("TF", 1, 2, 5),
    ),
    "tf_unigrams_only": (np.array(SEQ, np.int64), _tfidf_attrs("TF", 1, 1, 3)),
    "idf_no_weights": (np.array(SEQ, np.int64), _tfidf_attrs("IDF", 1, 2, 1)),
    "idf_weights": (
        np.array(SEQ, np.int64).reshape(3, 4),
        _tfidf_attrs("IDF", 1, 2, 2, weights=[0.5, 1, 2, 3, 4, 5, 6]),
    ),
    "tfidf_weights": (
        np.array(SEQ, np.int32).reshape(2, 6),
        _tfidf_attrs("TFIDF", 1, 2, 5, weights=[0.5, 1, 2, 3, 4, 5, 6]),
    ),
    "tfidf_no_weights": (np.array(SEQ, np.int64), _tfidf_attrs("TFIDF", 1, 2, 0)),
    "level_empty": (
        np.array(SEQ, np.int32),
        _tfidf_attrs(
            "TF",
            2,
            2,
            0,
            ngram_counts=[0, 0],
            ngram_indexes=[0, 1, 2],
            pool_int64s=[5, 6, 7, 8, 6, 7],
        ),
    ),
    "trigrams_shared_columns": (
        np.array([1, 2, 3, 1, 2, 3, 2, 3, 1, 9], np.int64).reshape(2, 5),
        _tfidf_attrs(
            "TF",
            1,
            3,
            1,
            ngram_counts=[0, 2, 6],
            ngram_indexes=[0, 1, 2, 3, 1, 5],
            pool_int64s=[1, 2, 1, 2, 2, 3, 1, 2, 3, 2, 3, 1],
        ),
    ),
    "empty_1d": (np.empty((0,), np.int64), _tfidf_attrs("TF", 1, 2, 0)),
    "empty_rows": (np.empty((2, 0), np.int32), _tfidf_attrs("TF", 1, 2, 0)),
}


@pytest.mark.parametrize("case", sorted(TFIDF_CASES))
def test_tfidf_vectorizer_9(case: str) -> None:
    x, attrs = TFIDF_CASES[case]
    # The reference evaluator fails on IDF/TFIDF without weights (it takes len(None)).
    oracle = "ort" if attrs["mode"] != "TF" and "weights" not in attrs else "ref"
    check_node("TfIdfVectorizer", {"x": x}, attrs=attrs, opset=9, oracle=oracle)


@pytest.mark.parametrize("mode", ["IDF", "TFIDF"])
def test_tfidf_vectorizer_9_weights_follow_pool_ngrams(mode: str) -> None:
    # weights[k] is the weight of the k-th pool n-gram (spec), which lands in column
    # ngram_indexes[k]; the reference evaluator indexes weights by output column instead, so
    # onnxruntime (which follows the spec) is the oracle.
    attrs = _tfidf_attrs(
        mode,
        1,
        2,
        2,
        ngram_indexes=[6, 0, 5, 1, 4, 2, 3],
        weights=[1.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0],
    )
    x = np.array(SEQ, np.int64).reshape(2, 6)
    check_node("TfIdfVectorizer", {"x": x}, attrs=attrs, opset=9, oracle="ort")


def test_tfidf_vectorizer_9_strings() -> None:
    words = S("the", "cat", "sat", "on", "the", "mat", "the", "cat", "ran", "unknown")
    attrs = {
        "mode": "TFIDF",
        "min_gram_length": 1,
        "max_gram_length": 2,
        "max_skip_count": 1,
        "ngram_counts": [0, 3],
        "ngram_indexes": [0, 1, 2, 3, 4],
        "pool_strings": ["the", "cat", "mat", "the", "cat", "cat", "sat"],
        "weights": [0.1, 0.2, 0.3, 0.4, 0.5],
    }
    check_node("TfIdfVectorizer", {"x": words}, attrs=attrs, opset=9)
    check_node("TfIdfVectorizer", {"x": words.reshape(2, 5)}, attrs=attrs, opset=9)


def test_tfidf_vectorizer_9_parallel_path() -> None:
    # 64 x 4096 tokens x 3 gaps is above the parallel threshold. The reference evaluator
    # counts in pure Python (minutes at this size), so onnxruntime is the oracle here.
    rng = np.random.default_rng(0)
    x = rng.integers(0, 12, size=(64, 4096)).astype(np.int64)
    attrs = _tfidf_attrs("TFIDF", 1, 2, 2, weights=[0.5, 1, 2, 3, 4, 5, 6])
    check_node("TfIdfVectorizer", {"x": x}, attrs=attrs, opset=9, oracle="ort", rtol=1e-6)


def test_tfidf_vectorizer_9_rejects_bad_pools() -> None:
    x = np.array(SEQ, np.int64)
    with pytest.raises(onnxjit.InvalidArgumentError, match="ngram_indexes"):
        _run("TfIdfVectorizer", {"x": x}, _tfidf_attrs("TF", 1, 2, 0, ngram_indexes=[0, 1]), 9)
    with pytest.raises(onnxjit.InvalidArgumentError, match="ngram_counts"):
        _run("TfIdfVectorizer", {"x": x}, _tfidf_attrs("TF", 1, 2, 0, ngram_counts=[0, 5]), 9)
    with pytest.raises(onnxjit.InvalidArgumentError, match="string"):
        _run("TfIdfVectorizer", {"x": S("a")}, _tfidf_attrs("TF", 1, 2, 0), 9)
    with pytest.raises(onnxjit.InvalidArgumentError, match="weights"):
        _run("TfIdfVectorizer", {"x": x}, _tfidf_attrs("IDF", 1, 2, 0, weights=[1.0]), 9)


def test_tfidf_vectorizer_9_plan_binds_the_pool_once() -> None:
    """A session's plan runs TfIdfVectorizer through its bound call (the pool's trie built
    once for the plan), equal to onnxruntime while the rows and their length change."""
    attrs = _tfidf_attrs("TFIDF", 1, 2, 1, weights=[0.5, 1, 2, 3, 4, 5, 6])
    x = np.array([SEQ, SEQ[::-1]], np.int64)
    model = make_node_model("TfIdfVectorizer", {"x": x}, attrs, 9)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "c"
    declare_outputs_like(model, [np.zeros((2, 7), np.float32)])
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "n"
    sess = onnxjit.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(3)
    for shape in ((2, 12), (2, 12), (5, 9), (1, 30), (5, 9)):
        feed = {"x": rng.integers(0, 10, shape).astype(np.int64)}
        (got,) = sess.run(None, feed)
        assert_close(got, ort_outputs(model, feed)[0], 1e-6, 1e-6, "TfIdfVectorizer")
        (step,) = sess.stats()["plans"][-1]["steps"]
        assert not step["generic"]


# ------------------------------------------------------------------- randomised comparisons


def _random_tfidf_case(seed: int) -> tuple[np.ndarray, dict]:
    """A random pool (1- to 3-grams over a small vocabulary, shuffled columns), settings and
    input; strings for a third of the seeds."""
    rng = np.random.default_rng(seed)
    max_n = int(rng.integers(1, 4))
    min_n = int(rng.integers(1, max_n + 1))
    vocab = int(rng.integers(2, 6))
    starts: list[int] = []
    pool: list[int] = []
    seen: set[tuple[int, ...]] = set()
    for n in range(1, max_n + 1):
        starts.append(len(pool))
        for _ in range(int(rng.integers(0, 5))):
            gram = tuple(int(v) for v in rng.integers(0, vocab, n))
            if gram not in seen:
                seen.add(gram)
                pool.extend(gram)
    if not seen:
        pool, starts = [0], [0] + [1] * (max_n - 1)
        seen.add((0,))
    n_grams = len(seen)
    columns = [int(v) for v in rng.permutation(n_grams + int(rng.integers(0, 3)))[:n_grams]]
    attrs = {
        "mode": ("TF", "IDF", "TFIDF")[seed % 3],
        "min_gram_length": min_n,
        "max_gram_length": max_n,
        "max_skip_count": int(rng.integers(0, 4)),
        "ngram_counts": starts,
        "ngram_indexes": columns,
    }
    if seed % 2:
        attrs["weights"] = [float(v) for v in rng.random(n_grams)]
    shape = (int(rng.integers(1, 4)), int(rng.integers(0, 12))) if seed % 4 < 2 else (12,)
    x = rng.integers(0, vocab + 1, shape)
    if seed % 3 == 0:
        attrs["pool_strings"] = [f"w{v}" for v in pool]
        words = np.empty(shape, dtype=object)
        words.flat[:] = [f"w{v}" for v in x.flat]
        return words, attrs
    attrs["pool_int64s"] = pool
    return x.astype(np.int32 if seed % 5 == 0 else np.int64), attrs


@pytest.mark.parametrize("seed", range(24))
def test_tfidf_vectorizer_9_random_pools(seed: int) -> None:
    # onnxruntime is the oracle: the reference evaluator indexes weights by column and fails
    # without weights in IDF/TFIDF mode (see above).
    x, attrs = _random_tfidf_case(seed)
    check_node("TfIdfVectorizer", {"x": x}, attrs=attrs, opset=9, oracle="ort")


@pytest.mark.parametrize("seed", range(6))
def test_string_split_and_concat_random_text(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    alphabet = list("ab ,-\t\n的é") + ["--", ", "]
    texts = ["".join(rng.choice(alphabet, int(rng.integers(0, 9)))) for _ in range(8)]
    x = S(*texts).reshape(2, 4)
    for attrs in ({}, {"delimiter": ","}, {"delimiter": "--", "maxsplit": 1}):
        check_node("StringSplit", {"x": x}, attrs=attrs, opset=20, n_outputs=2)
    check_node("StringConcat", {"x": x, "y": S(*texts[:4])}, opset=20)
