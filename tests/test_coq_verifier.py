"""CoqVerifier: real ``coqc`` runs (skipped, with the reason, where Coq is not installed), screening, Lean stub."""

import shutil

import pytest

from trl_loo_gspo.rewards.base import VerifierResult
from trl_loo_gspo.rewards.proofs import (
    CoqBackend,
    CoqVerifier,
    LeanBackend,
    analyze_coq_script,
    extract_proof_script,
    theorem_name,
)

requires_coq = pytest.mark.skipif(
    shutil.which("coqc") is None, reason="coqc not installed (apt-get install -y coq); CI installs it"
)

ADD_0_R = "Theorem add_0_r : forall n : nat, n + 0 = n."
GOOD = "intros n. induction n; simpl; auto."


@pytest.fixture(scope="module")
def verifier() -> CoqVerifier:
    return CoqVerifier(timeout=15)


def check(verifier: CoqVerifier, completion: str, **columns) -> VerifierResult:
    columns.setdefault("theorem", ADD_0_R)
    return verifier.safe_verify(completion, **columns)


@requires_coq
@pytest.mark.parametrize(
    "completion",
    [
        GOOD,
        f"Here is the proof:\n```coq\n{GOOD}\n```\n",
        f"```coq\nProof.\n  {GOOD}\nQed.\n```",
        f"```coq\n{ADD_0_R}\nProof.\n  intros n. induction n as [|n IH].\n  - reflexivity.\n  - simpl. rewrite IH."
        " reflexivity.\nQed.\n```",
    ],
)
def test_correct_proof_scores_one(verifier, completion):
    result = check(verifier, completion)
    assert (result.score, result.status, result.anomaly) == (1.0, "pass", None), result.details
    assert result.details["assumptions"] == []


@requires_coq
def test_lia_with_dataset_preamble(verifier):
    result = check(verifier, "```coq\nRequire Import Lia.\nintros; lia.\n```", preamble="Require Import Lia.")
    assert result.score == 1.0, result.details  # a verbatim copy of the preamble is tolerated
    assert check(verifier, "intros; lia.").score == 0.0  # without the preamble, lia is unknown


@requires_coq
@pytest.mark.parametrize(
    ("completion", "rule"),
    [
        ("Proof. Admitted.", "not_a_tactic:Admitted"),
        ("intros n. admit.", "forbidden_word:admit"),
        ("intros n. induction n; [ admit | simpl; auto ].", "forbidden_word:admit"),
        ("Axiom cheat : False. destruct cheat.", "not_a_tactic:Axiom"),
        ("intros n. exfalso. Abort.", "not_a_tactic:Abort"),
        ("```coq\nTheorem add_0_r : True.\nProof. exact I. Qed.\n```", "statement_mismatch"),
        (f"{GOOD} Qed. Theorem add_0_r' : True. exact I.", "not_a_tactic:Qed"),
        ("Reset add_0_r. Theorem add_0_r : True. exact I.", "not_a_tactic:Reset"),
        ('Load "/etc/passwd". auto.', "not_a_tactic:Load"),
        ('Redirect "/tmp/x" Print nat. auto.', "not_a_tactic:Redirect"),
        ("Unset Guard Checking. auto.", "not_a_tactic:Unset"),
        ('Declare ML Module "evil". auto.', "not_a_tactic:Declare"),
        ("- Hypothesis h : False. auto.", "not_a_tactic:Hypothesis"),
        ("all: Fail Qed.", "not_a_tactic:Fail"),
    ],
)
def test_cheats_are_rejected(verifier, completion, rule):
    result = check(verifier, completion)
    assert (result.score, result.status) == (0.0, "rejected"), result.details
    assert result.details["rule"] == rule
    assert verifier.hack_score(completion, theorem=ADD_0_R) == 1.0


@requires_coq
def test_wrong_proof_scores_zero_with_location(verifier):
    result = check(verifier, "intros n.\nreflexivity.")
    assert (result.score, result.status, result.anomaly) == (0.0, "fail", None)
    assert "Error" in result.details["error"]
    assert result.details["error_location"]["region"] == "proof"
    assert result.details["error_location"]["line"] == 2
    incomplete = check(verifier, "intros n.")
    assert incomplete.score == 0.0 and incomplete.details["error_location"]["region"] == "qed"


@requires_coq
def test_nonterminating_proof_times_out(verifier):
    fast = CoqVerifier(timeout=1.5, backend=verifier.backend)
    result = fast.safe_verify("intros n. do 1000000000 idtac.", theorem=ADD_0_R)
    assert (result.score, result.status, result.anomaly) == (0.0, "timeout", "timeout"), result.details
    assert result.details["elapsed"] < 10


@requires_coq
def test_allow_listed_axiom():
    theorem = "Theorem lem : forall P : Prop, P \\/ ~ P."
    row = {"theorem": theorem, "preamble": "Require Import Classical."}
    strict = CoqVerifier(timeout=15)
    result = strict.safe_verify("intros P. apply classic.", **row)
    assert result.score == 0.0 and result.details["disallowed_axioms"] == ["classic"]
    allowing = CoqVerifier(allowed_axioms=["Classical_Prop.classic"], timeout=15, backend=strict.backend)
    result = allowing.safe_verify("intros P. apply classic.", **row)
    assert result.score == 1.0 and result.details["assumptions"] == ["classic"]


@requires_coq
def test_preamble_axioms_and_admitted_lemmas_are_caught(verifier):
    preamble = "Axiom magic : forall n : nat, n + 0 = n.\nLemma helper : 0 = 0. Admitted."
    assert check(verifier, "exact magic.", preamble=preamble).details["disallowed_axioms"] == ["magic"]
    assert check(verifier, f"pose proof helper. {GOOD}", preamble=preamble).details["disallowed_axioms"] == ["helper"]
    assert check(verifier, GOOD, preamble=preamble).score == 1.0  # present but unused: not an assumption


@requires_coq
def test_infrastructure_failures_are_unscorable(verifier):
    broken = check(verifier, GOOD, preamble="Require Import NoSuchLibrary.")
    assert (broken.score, broken.anomaly) == (None, "verifier_exception")
    assert broken.details["error_location"]["region"] == "preamble"
    assert check(verifier, GOOD, theorem="Goal True.").anomaly == "verifier_exception"
    empty = check(verifier, "```coq\n```")
    assert (empty.score, empty.anomaly) == (0.0, "parse_failure")


@requires_coq
def test_trl_reward_function_interface(verifier):
    logged = {}
    scores = verifier(
        prompts=["p"] * 4,
        completions=[GOOD, "intros n. admit.", [{"role": "assistant", "content": f"```coq\n{GOOD}\n```"}], "simpl."],
        theorem=[ADD_0_R] * 3 + ["Lemma bad : Require."],
        log_metric=logged.__setitem__,
    )
    assert scores == [1.0, 0.0, 1.0, None]
    assert all(s is None or isinstance(s, float) for s in scores)
    assert logged["verifiers/coq/unscorable"] == 0.25


@requires_coq
def test_rlimits_only_sandbox_and_describe():
    backend = CoqBackend(sandbox="none")
    assert backend.available() and "Coq" in backend.version()
    verifier = CoqVerifier(timeout=15, backend=backend)
    assert verifier.safe_verify(GOOD, theorem=ADD_0_R).score == 1.0
    assert verifier.describe()["name"] == "coq"


def test_hack_score_is_static_and_graded():
    from trl_loo_gspo.rewards.proofs import HACK_WEIGHTS

    def hack(script: str) -> float:
        _, findings = analyze_coq_script(script, ADD_0_R)
        return max((HACK_WEIGHTS[f.category] for f in findings), default=0.0)

    assert hack(GOOD) == 0.0
    assert hack(f"```coq\n{ADD_0_R}\nProof. {GOOD} Qed.\n```".split("```coq\n")[1].rstrip("`\n")) == 0.0
    assert hack("Admitted.") == 1.0
    assert hack('idtac "Closed under the global context". auto.') == 0.8
    assert hack("exact_no_check I.") == 0.5
    assert hack("Check nat. auto.") == 0.3
    assert hack("(* Axiom in a comment is fine *) auto.") == 0.0


def test_script_extraction_and_lexing():
    assert extract_proof_script("x\n```coq\na.\n```\ny\n```coq\nb.\n```") == "b."
    assert extract_proof_script("```\nc.\n```") == "c."
    assert extract_proof_script("```coq\nd. (* truncated") == "d. (* truncated"
    assert extract_proof_script("auto.") == "auto."
    assert theorem_name("(* c *) Lemma foo' : True.") == "foo'"
    body, findings = analyze_coq_script('(* "*) Qed." *) auto. idtac "Qed.".', ADD_0_R)
    assert findings == [] and body.endswith('idtac "Qed.".')
    # a '.' followed by a comment or a non-identifier character is cut conservatively
    _, findings = analyze_coq_script("auto.(* c *)Qed. exact I.", ADD_0_R)
    assert findings and findings[0].rule == "not_a_tactic:Qed"
    _, findings = analyze_coq_script("auto. (* unterminated", ADD_0_R)
    assert findings[0].rule == "unlexable"


def test_lean_backend_reports_unavailable():
    backend = LeanBackend(lean="lean-definitely-not-installed")
    availability = backend.available()
    assert not availability
    assert "not found on PATH" in availability.reason and "elan" in availability.reason
    with pytest.raises(RuntimeError, match="elan"):
        backend.check("theorem t : True", "trivial", timeout=1)
    if shutil.which("lean") is None:
        assert not LeanBackend().available()
