"""trl_loo_gspo.experiment.data: column contract, mappers on raw public rows, loading, leak-free validation split."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from datasets import Dataset

from trl_loo_gspo.experiment.data import (
    MAPPERS,
    TASK_COLUMNS,
    infer_mapper,
    last_boxed,
    load_task_dataset,
    map_humaneval,
    prepare_dataset,
    split_validation,
    validate_columns,
)
from trl_loo_gspo.records.registration import split_overlap
from trl_loo_gspo.verifiers.code.test_plan import plan_test
from trl_loo_gspo.verifiers.math import MathVerifier
from trl_loo_gspo.verifiers.proofs.coq import extract_proof_script

from .helpers import small_sandbox_limits

ROOT = Path(__file__).resolve().parent.parent
COQ_BASICS = ROOT / "recipes" / "data" / "coq_basics.jsonl"

# -- raw rows, in each public dataset's exact format ------------------------------------------------------------

GSM8K = [
    {
        "question": "A shop sold 617 pens on Monday and twice as many on Tuesday. How many pens did it sell in total?",
        "answer": "Tuesday: 2 * 617 = <<2*617=1234>>1234 pens.\nTotal: 617 + 1234 = <<617+1234=1851>>1851.\n"
        "#### 1,851",
    },
    {
        "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
        "How many clips did Natalia sell altogether in April and May?",
        "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips "
        "altogether in April and May.\n#### 72",
    },
]
MATH = [
    {
        "problem": "What is $\\frac{3}{6}$ in lowest terms?",
        "level": "Level 1",
        "type": "Prealgebra",
        "solution": "Both 3 and 6 are divisible by 3 (so $\\boxed{3}$ is a common factor), and "
        "$\\frac{3}{6} = \\boxed{\\frac{1}{2}}$.",
    },
    {
        "problem": "Convert the point $(0,3)$ in rectangular coordinates to polar coordinates.",
        "level": "Level 2",
        "type": "Precalculus",
        "solution": "We have $r = 3$ and $\\theta = \\frac{\\pi}{2}$, so the polar coordinates are "
        "$\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}.$",
    },
]
MATH500 = [
    {
        "problem": "Compute $\\dbinom{8}{4}$.",
        "solution": "$\\dbinom{8}{4} = \\boxed{70}.$",
        "answer": "70",
        "subject": "Counting & Probability",
        "level": 2,
        "unique_id": "test/counting_and_probability/1.json",
    },
    {
        "problem": "Simplify $\\sqrt{8}$.",
        "solution": "$\\sqrt{8} = \\boxed{2\\sqrt{2}}$.",
        "answer": "2\\sqrt{2}",
        "subject": "Algebra",
        "level": 1,
        "unique_id": "test/algebra/2.json",
    },
]
MBPP = [
    {
        "task_id": 11,
        "text": "Write a python function to remove first and last occurrence of a given character from the string.",
        "code": "def remove_Occ(s,ch): \r\n    for i in range(len(s)): \r\n        if (s[i] == ch): \r\n"
        "            s = s[0 : i] + s[i + 1:] \r\n            break\r\n    for i in range(len(s) - 1,-1,-1):  \r\n"
        "        if (s[i] == ch): \r\n            s = s[0 : i] + s[i + 1:] \r\n            break\r\n    return s ",
        "test_list": [
            'assert remove_Occ("hello","l") == "heo"',
            'assert remove_Occ("abcda","a") == "bcd"',
            'assert remove_Occ("PHP","P") == "H"',
        ],
        "test_setup_code": "",
        "challenge_test_list": ['assert remove_Occ("hellolloll","l") == "helollol"'],
    },
    {
        "task_id": 17,
        "text": "Write a function to find the perimeter of a square.",
        "code": "def square_perimeter(a):\r\n  perimeter=4*a\r\n  return perimeter",
        "test_list": [
            "assert square_perimeter(10)==40",
            "assert square_perimeter(5)==20",
            "assert square_perimeter(4)==16",
        ],
        "test_setup_code": "import math",
        "challenge_test_list": [],
    },
]
HUMANEVAL_PROMPT = (
    "from typing import List\n\n\ndef has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
    '    """ Check if in given list of numbers, are any two numbers closer to each other than\n'
    "    given threshold.\n    >>> has_close_elements([1.0, 2.0, 3.0], 0.5)\n    False\n"
    '    >>> has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)\n    True\n    """\n'
)
HUMANEVAL = [
    {
        "task_id": "HumanEval/0",
        "prompt": HUMANEVAL_PROMPT,
        "canonical_solution": "    for idx, elem in enumerate(numbers):\n"
        "        for idx2, elem2 in enumerate(numbers):\n            if idx != idx2:\n"
        "                distance = abs(elem - elem2)\n"
        "                if distance < threshold:\n                    return True\n\n    return False\n",
        "test": "\n\nMETADATA = {\n    'author': 'jt',\n    'dataset': 'test'\n}\n\n\ndef check(candidate):\n"
        "    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True\n"
        "    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05) == False\n"
        "    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.95) == True\n"
        "    assert candidate([1.1, 2.2, 3.1, 4.1, 5.1], 1.0) == True\n\n",
        "entry_point": "has_close_elements",
    },
    {
        "task_id": "HumanEval/4",
        "prompt": 'def add(x: int, y: int):\n    """Add two numbers x and y\n    >>> add(2, 3)\n    5\n    """\n',
        "canonical_solution": "    return x + y\n",
        "test": "\n\nMETADATA = {}\n\n\ndef check(candidate):\n    assert candidate(0, 1) == 1\n"
        "    assert candidate(5, 7) == 12\n",
        "entry_point": "add",
    },
]
COQ = [
    {
        "name": "add_0_r",
        "theorem": "Theorem add_0_r : forall n : nat, n + 0 = n.",
        "preamble": "",
        "reference_proof": "Proof.\n  intros n. induction n; simpl; auto.\nQed.",
    },
    {
        "name": "add_comm_lia",
        "theorem": "Theorem add_comm_lia : forall n m : nat, n + m = m + n.",
        "preamble": "Require Import Lia.",
        "reference_proof": "Proof.\n  intros n m. lia.\nQed.",
    },
]


def user_text(row: dict) -> str:
    return row["prompt"][-1]["content"] if isinstance(row["prompt"], list) else row["prompt"]


# -- the contract ----------------------------------------------------------------------------------------------


def test_task_columns_and_validate_error_names_the_column():
    assert TASK_COLUMNS == {
        "math": ("prompt", "answer"),
        "code": ("prompt", "tests|io_cases"),
        "proofs": ("prompt", "theorem"),
    }
    validate_columns(Dataset.from_list([{"prompt": "p", "answer": "1"}]), "math")
    validate_columns(Dataset.from_list([{"prompt": "p", "io_cases": [{"input": "", "output": "1"}]}]), "code")
    with pytest.raises(ValueError, match=r"'math' task needs column\(s\) 'answer'.*\['prompt', 'solution'\]"):
        validate_columns(Dataset.from_list([{"prompt": "p", "solution": "1"}]), "math")
    with pytest.raises(ValueError, match="'tests' or 'io_cases'"):
        validate_columns(Dataset.from_list([{"prompt": "p"}]), "code")
    with pytest.raises(ValueError, match="unknown task 'chess'"):
        validate_columns(Dataset.from_list([{"prompt": "p"}]), "chess")


# -- math mappers ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def math_verifier() -> MathVerifier:
    return MathVerifier()


@pytest.mark.parametrize(
    "raw, mapper, answers, right, wrong",
    [
        (GSM8K, "gsm8k", ["1851", "72"], ["1851", "72"], ["1850", "73"]),
        (
            MATH,
            "math",
            ["\\frac{1}{2}", "\\left( 3, \\frac{\\pi}{2} \\right)"],
            ["0.5", "(3, \\pi/2)"],
            ["1/3", "(3, 0)"],
        ),
        (MATH500, "math500", ["70", "2\\sqrt{2}"], ["70", "\\sqrt{8}"], ["35", "2"]),
    ],
)
def test_math_mappers_produce_gold_answers_the_verifier_accepts(math_verifier, raw, mapper, answers, right, wrong):
    assert infer_mapper(list(raw[0])) == mapper
    data = prepare_dataset(Dataset.from_list(raw), "math")
    assert data.column_names == ["prompt", "answer"]
    assert data["answer"] == answers
    for row, good, bad in zip(data, right, wrong, strict=True):
        assert user_text(row).endswith("put the final answer in \\boxed{}.")
        assert row["prompt"] == [{"role": "user", "content": user_text(row)}]
        good_completion = f"Reasoning... so the answer is $\\boxed{{{good}}}$."
        assert math_verifier.verify(good_completion, answer=row["answer"]).score == 1.0
        assert math_verifier.verify(f"Hence $\\boxed{{{bad}}}$.", answer=row["answer"]).score == 0.0
    assert user_text(data[0]).startswith(raw[0].get("question") or raw[0].get("problem"))


def test_last_boxed_nested_and_bare():
    assert last_boxed("$\\boxed{1}$ then $\\boxed{\\frac{1}{\\sqrt{2}}}$") == "\\frac{1}{\\sqrt{2}}"
    assert last_boxed("so $\\boxed 5$.") == "5"
    assert last_boxed("\\fbox{7}") == "7"
    assert last_boxed("no answer") is None


def test_rows_without_an_answer_are_dropped_with_a_warning():
    raw = [MATH[0], {**MATH[1], "solution": "no boxed answer here"}]
    with pytest.warns(UserWarning, match="dropped 1 of 2 rows"):
        data = prepare_dataset(Dataset.from_list(raw), "math")
    assert data["answer"] == ["\\frac{1}{2}"]


# -- code mappers ----------------------------------------------------------------------------------------------


def test_mbpp_mapper_prompt_tests_and_setup():
    assert infer_mapper(list(MBPP[0])) == "mbpp"
    sanitized = ["source_file", "task_id", "prompt", "code", "test_imports", "test_list"]  # the "sanitized" config
    assert infer_mapper(sanitized) == "mbpp"
    data = prepare_dataset(Dataset.from_list(MBPP), "code", conversational=False)
    assert data.column_names == ["prompt", "tests", "reference"]  # the reference declares the program's names
    first = data[0]
    assert first["prompt"] == (
        f"{MBPP[0]['text']}\nYour code should pass this test:\n{MBPP[0]['test_list'][0]}\n\n"
        "Write the solution as a complete Python program in a ```python block."
    )
    assert first["tests"] == MBPP[0]["test_list"] + MBPP[0]["challenge_test_list"]
    assert data[1]["tests"] == [f"import math\n{t}" for t in MBPP[1]["test_list"]]


def test_humaneval_mapper_builds_a_runnable_check():
    assert infer_mapper(list(HUMANEVAL[0])) == "humaneval"
    data = prepare_dataset(Dataset.from_list(HUMANEVAL), "code", system_prompt="You are a careful programmer.")
    row = data[0]
    assert row["prompt"][0] == {"role": "system", "content": "You are a careful programmer."}
    assert HUMANEVAL_PROMPT.rstrip() in row["prompt"][1]["content"]
    (test,) = row["tests"]
    assert test.endswith(HUMANEVAL[0]["test"].rstrip() + "\n\ncheck(has_close_elements)\n")
    namespace: dict = {}  # the test string is one program: it defines check() and calls it on the entry point
    exec(HUMANEVAL[1]["prompt"] + HUMANEVAL[1]["canonical_solution"], namespace)
    exec(data[1]["tests"][0], namespace)
    with pytest.raises(AssertionError):
        exec(data[1]["tests"][0], {"add": lambda x, y: x - y})


def test_humaneval_tests_carry_the_prompts_helpers_not_the_entry_point():
    prompt = "import math\n\ndef poly(xs, x):\n    return sum(c * x ** i for i, c in enumerate(xs))\n\n"
    prompt += 'def find_zero(xs):\n    """Find x with poly(xs, x) == 0."""\n'
    row = {"prompt": prompt, "test": "def check(candidate):\n    assert poly([1, 1], candidate([1, 1])) == 0\n"}
    (test,) = map_humaneval({**row, "entry_point": "find_zero"})["tests"]
    assert test.startswith("import math\n\ndef poly(xs, x):") and "def find_zero" not in test
    assert plan_test(test).remote == ("find_zero",)  # poly is the dataset's, judged in the judge


def test_weakly_verified_code_rows_are_reported():
    rows = [{"prompt": "p", "tests": ["assert apply(lambda v: v, 1) == 1"]}, {"prompt": "q", "tests": ["assert f(1)"]}]
    with pytest.warns(UserWarning, match=r"1 of 2 code rows are weakly verified .*lambda.*unscorable"):
        prepare_dataset(Dataset.from_list(rows), "code", mapper="identity")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")
def test_code_rows_scored_by_the_real_code_verifier():
    from trl_loo_gspo.verifiers.code.verifier import CodeVerifier

    verifier = CodeVerifier(limits=small_sandbox_limits(), max_workers=2)
    mbpp = prepare_dataset(Dataset.from_list(MBPP), "code")
    humaneval = prepare_dataset(Dataset.from_list(HUMANEVAL), "code")
    cases = [
        (mbpp[0], MBPP[0]["code"], 'def remove_Occ(s, ch):\n    return s.replace(ch, "")'),  # fails the challenge
        (mbpp[1], MBPP[1]["code"], "def square_perimeter(a):\n    return 2 * a"),
        (humaneval[0], HUMANEVAL_PROMPT + HUMANEVAL[0]["canonical_solution"], HUMANEVAL_PROMPT + "    return True\n"),
    ]
    for row, good, bad in cases:
        columns = {k: v for k, v in row.items() if k != "prompt"}
        right = verifier.verify(f"Solution:\n```python\n{good}\n```", **columns)
        assert (right.score, right.status) == (1.0, "pass"), right.details
        wrong = verifier.verify(f"```python\n{bad}\n```", **columns)
        assert (wrong.score, wrong.status) == (0.0, "fail"), wrong.details


# -- proofs ------------------------------------------------------------------------------------------------------


def test_coq_mapper_hides_the_reference_proof():
    assert infer_mapper(list(COQ[0])) == "coq"
    data = prepare_dataset(Dataset.from_list(COQ), "proofs", conversational=False)
    assert data.column_names == ["prompt", "theorem", "preamble"]
    assert data["theorem"] == [COQ[0]["theorem"], COQ[1]["theorem"]]
    assert data["preamble"] == ["", "Require Import Lia."]
    assert "```coq\nRequire Import Lia.\nTheorem add_comm_lia" in data[1]["prompt"]
    assert "starting with Proof. and ending with Qed." in data[1]["prompt"]
    assert all("lia." not in p and "intros" not in p for p in data["prompt"])


def load_coq_basics() -> list[dict]:
    return [json.loads(line) for line in COQ_BASICS.read_text().splitlines() if line.strip()]


def test_coq_basics_schema_and_unique_statements():
    rows = load_coq_basics()
    assert 25 <= len(rows) <= 40
    assert all(set(row) == {"name", "theorem", "preamble", "reference_proof"} for row in rows)
    assert len({row["theorem"] for row in rows}) == len(rows)
    assert len({row["name"] for row in rows}) == len(rows)
    assert all(row["theorem"].startswith(f"Theorem {row['name']} :") for row in rows)
    assert all(row["reference_proof"].startswith("Proof.") and row["reference_proof"].endswith("Qed.") for row in rows)
    data = load_task_dataset(str(COQ_BASICS), "train", "proofs")
    assert len(data) == len(rows) and "reference_proof" not in data.column_names


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("coqc") is None, reason="coqc not installed (apt-get install -y coq)")
def test_coq_basics_reference_proofs_check():
    from trl_loo_gspo.verifiers.proofs.coq import CoqVerifier

    rows = load_coq_basics()
    verifier = CoqVerifier(timeout=30)
    completions = [f"```coq\n{row['reference_proof']}\n```" for row in rows]
    assert extract_proof_script(completions[0]) == rows[0]["reference_proof"]
    columns = [{"theorem": row["theorem"], "preamble": row["preamble"]} for row in rows]
    results = verifier.verify_batch(completions, columns)
    failed = {row["name"]: r.details for row, r in zip(rows, results, strict=True) if r.score != 1.0}
    assert not failed
    wrong = verifier.verify("```coq\nProof.\n  intros n. reflexivity.\nQed.\n```", **columns[0])
    assert wrong.score == 0.0


# -- mapper inference and custom mappers -------------------------------------------------------------------------


def test_infer_mapper_identity_and_errors():
    assert infer_mapper(["prompt", "answer"]) == "identity"
    assert infer_mapper(["prompt", "tests"]) == "identity"
    with pytest.raises(ValueError, match=r"no known format matches.*'gsm8k'.*'humaneval'"):
        infer_mapper(["text", "label"])
    with pytest.raises(ValueError, match=r"ambiguous: \['gsm8k', 'identity'\]"):
        infer_mapper(["question", "answer", "prompt"])
    assert set(MAPPERS) == {"gsm8k", "math", "math500", "mbpp", "humaneval", "coq", "identity"}


def test_identity_keeps_chat_prompts_and_extra_columns():
    chat = [{"role": "user", "content": "1+1?"}]
    data = prepare_dataset(Dataset.from_list([{"prompt": chat, "answer": "2", "source": "mine"}]), "math", "identity")
    assert data[0] == {"prompt": chat, "answer": "2", "source": "mine"}
    data = prepare_dataset(Dataset.from_list([{"prompt": chat, "answer": "2"}]), "math", system_prompt="Be brief.")
    assert data[0]["prompt"] == [{"role": "system", "content": "Be brief."}, *chat]
    with pytest.raises(ValueError, match="already a chat"):
        prepare_dataset(Dataset.from_list([{"prompt": chat, "answer": "2"}]), "math", conversational=False)


def shout_mapper(row: dict) -> dict:
    return {"prompt": row["q"].upper(), "answer": str(row["a"])}


def test_dotted_path_mapper_and_max_rows():
    raw = Dataset.from_list([{"q": f"what is {i}?", "a": i} for i in range(5)])
    for mapper in ("tests.test_data.shout_mapper", "tests.test_data:shout_mapper", shout_mapper):
        data = prepare_dataset(raw, "math", mapper=mapper, conversational=False, max_rows=3)
        assert data["prompt"] == ["WHAT IS 0?", "WHAT IS 1?", "WHAT IS 2?"]
        assert data["answer"] == ["0", "1", "2"]
    shuffled = prepare_dataset(raw, "math", mapper=shout_mapper, max_rows=5, seed=1)
    assert sorted(shuffled["answer"]) == ["0", "1", "2", "3", "4"] and shuffled["answer"] != ["0", "1", "2", "3", "4"]
    with pytest.raises(ValueError, match="system_prompt needs conversational=True"):
        prepare_dataset(raw, "math", mapper=shout_mapper, system_prompt="x", conversational=False)
    with pytest.raises(ValueError, match=r"'math' task needs column\(s\) 'prompt'"):
        prepare_dataset(raw, "math", mapper=lambda row: {"answer": "1"})
    with pytest.raises(ValueError, match="unknown mapper 'nonsense'"):
        prepare_dataset(raw, "math", mapper="nonsense")
    with pytest.raises(ValueError, match=r"'code' task needs column\(s\) 'tests' or 'io_cases'"):
        prepare_dataset(raw, "code", mapper=shout_mapper)


# -- loading and splitting ---------------------------------------------------------------------------------------


def test_load_task_dataset_from_local_jsonl(tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in GSM8K))
    data = load_task_dataset(str(path), "train", "math", conversational=False)
    assert data["answer"] == ["1851", "72"]
    assert data["prompt"][1].startswith("Natalia sold clips")
    Dataset.from_list(MBPP).save_to_disk(str(tmp_path / "saved"))
    saved = load_task_dataset(str(tmp_path / "saved"), "test", "code", mapper="mbpp", max_rows=1)
    assert len(saved) == 1 and saved[0]["tests"][0] == MBPP[0]["test_list"][0]
    with pytest.raises(FileNotFoundError):
        load_task_dataset(str(tmp_path / "missing.jsonl"), "train", "math")


def test_split_validation_never_shares_a_prompt():
    # 30 rows, 12 distinct prompts: prompt k appears (k % 4) + 1 times
    rows = [{"prompt": f"question {k}", "answer": str(j)} for k in range(12) for j in range(k % 4 + 1)]
    dataset = Dataset.from_list(rows)
    assert len(dataset) == 30
    for size, expected in ((7, 7), (0.2, 6), (1, 1)):
        for seed in (0, 1, 2):
            train, validation = split_validation(dataset, size, seed=seed)
            assert (len(train), len(validation)) == (30 - expected, expected)
            assert split_overlap(train, validation) == []
            assert not set(train["prompt"]) & set(validation["prompt"])
    validation0 = split_validation(dataset, 7, seed=0)[1]
    assert split_validation(dataset, 7, seed=0)[1]["prompt"] == validation0["prompt"]
    assert len({tuple(split_validation(dataset, 7, seed=s)[1]["prompt"]) for s in range(5)}) > 1
    with pytest.raises(ValueError, match="need 0 < size < rows"):
        split_validation(dataset, 30, seed=0)
    with pytest.raises(ValueError, match=r"in \(0, 1\)"):
        split_validation(dataset, 1.5, seed=0)
