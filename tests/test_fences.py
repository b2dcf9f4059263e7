"""The linear-time fence finder: the same matches as the regular expressions it replaces, in linear time."""

import random
import re
import time

import pytest

from trl_loo_gspo.verifiers.text import COQ_LANG_CHARS, Fence, find_fences, iter_fences

CODE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)```", re.DOTALL)
COQ_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
STYLES = {
    "code": (CODE_RE, {}),
    "coq": (COQ_RE, {"lang_chars": COQ_LANG_CHARS, "allow_unterminated": True}),
}
# Weighted towards what matters to a fence: backticks, newlines, blanks, tag characters, '.', and the rest.
ALPHABET = "`" * 8 + "\n" * 3 + " \t" + "py.c+-_" + "x{}\r"
PIECES = ["```", "```python\n", "```coq\n", "``` v.1 \n", "\n```\n", "``", "\t", ". "]


def expected(pattern: re.Pattern, text: str) -> list[tuple]:
    return [(m.group(1), m.start(2), m.end(2), m.start(), m.end()) for m in pattern.finditer(text)]


def found(text: str, **style) -> list[tuple]:
    return [(f.lang, f.start, f.end, f.match_start, f.match_end) for f in find_fences(text, **style)]


def random_text(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randrange(0, 12)):
        if rng.random() < 0.4:
            parts.append(rng.choice(PIECES))
        else:
            parts.append("".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, 8))))
    return "".join(parts)


@pytest.mark.parametrize("style", sorted(STYLES))
def test_same_matches_as_the_regex_on_random_text(style):
    pattern, kwargs = STYLES[style]
    rng = random.Random(f"fences-{style}")
    texts = [random_text(rng) for _ in range(20_000)]
    matched = 0
    for text in texts:
        assert found(text, **kwargs) == expected(pattern, text), repr(text)
        matched += bool(pattern.search(text))
    assert matched > 5_000  # the generator does produce fences, often several


@pytest.mark.parametrize(
    "text",
    [
        "",
        "```",
        "```\n",
        "```python\nprint(1)\n```",
        "a\n```py \t extra words\nx```y```z\nw```",
        "````\n````",
        "```v.1\nbody",
        "```\t c++ \nbody\n```\n```\nsecond",
        "``` \n```\n```\n",
    ],
)
def test_same_matches_as_the_regex_on_edge_cases(text):
    for pattern, kwargs in STYLES.values():
        assert found(text, **kwargs) == expected(pattern, text)


def test_the_two_styles_differ_where_the_patterns_do():
    assert find_fences("```v.1\nx\n```") == [Fence("v.1", 7, 9, True, 0, 12)]
    assert [f.lang for f in find_fences("```v.1\nx\n```", lang_chars=COQ_LANG_CHARS)] == ["v"]
    assert find_fences("```coq\nintros.") == []
    assert find_fences("```coq\nintros.", allow_unterminated=True) == [Fence("coq", 7, 14, False, 0, 14)]


@pytest.mark.parametrize(
    "text",
    ["`" * 1_000_000, "```\n" * 250_000, "``` " * 250_000, "```a" * 250_000, "```\n" + "x``" * 333_333],
    ids=["backticks", "fence-newline", "fence-no-newline", "fence-tag-no-newline", "open-then-near-misses"],
)
def test_a_megabyte_of_adversarial_fences_takes_well_under_a_second(text):
    for _, kwargs in STYLES.values():
        start = time.process_time()  # CPU time: other jobs on the machine do not count
        count, last = 0, None
        for fence in iter_fences(text, **kwargs):  # how the verifiers read fences: keeping only the last ones
            count, last = count + 1, fence
        assert time.process_time() - start < 5.0  # generous: quadratic scanning takes minutes here
        assert count == len(find_fences(text, **kwargs)) and (last is None or last.match_start < last.match_end)
