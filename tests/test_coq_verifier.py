"""CoqVerifier: real ``coqc`` runs (skipped, with the reason, where Coq is not installed), screening, Lean stub."""

import shutil
import time
from pathlib import Path

import pytest

from trl_loo_gspo.sandbox.limited_run import RunOutcome
from trl_loo_gspo.verifiers.base import VerifierResult
from trl_loo_gspo.verifiers.proofs import LeanBackend
from trl_loo_gspo.verifiers.proofs import coq as proofs
from trl_loo_gspo.verifiers.proofs.coq import (
    CoqBackend,
    CoqVerifier,
    analyze_coq_script,
    extract_proof_script,
    theorem_name,
)
from trl_loo_gspo.verifiers.proofs.script import _screen_coq_script, _sentence_head, _span_flags

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
    from trl_loo_gspo.verifiers.proofs.script import HACK_WEIGHTS

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


# --------------------------------------------------------------------------------------------------------------------
# Verdicts come from channels the proof cannot write
# --------------------------------------------------------------------------------------------------------------------

FORGERIES = {
    "idtac fake location": 'idtac "File ""/tmp/x.v"", line 1, characters 0-1:". intros n. reflexivity.',
    "fail with a fake location": 'fail "File ""./Check.v"", line 1, characters 0-1:".',
    "fail with a location and Error on their own lines": (
        'intros n. fail "\nFile ""./Check.v"", line 1, characters 0-5:\nError: The reference x was not found".'
    ),
    "fail with a fake bwrap line": 'intros n. fail "bwrap: Can\'t create file at /tmp: No space left on device".',
    "idtac fake bwrap line": 'idtac "bwrap: Can\'t mount proc on /newroot/proc". intros n. reflexivity.',
    "fake location in a nested tactic": 'intros n. exact (I : ltac:(fail "File ""a"", line 0, characters 0-0:")).',
}


@requires_coq
@pytest.mark.parametrize("proof", list(FORGERIES.values()), ids=list(FORGERIES))
def test_a_proof_cannot_forge_an_unscorable_verdict(verifier, proof):
    result = check(verifier, proof)
    assert (result.score, result.status, result.anomaly) == (0.0, "fail", None), result.details
    assert result.details["verdict_basis"].startswith("coqc exit 1; statement check ok")


@requires_coq
def test_printed_error_locations_are_informational_and_the_real_one_is_found(verifier):
    proof = 'intros n.\nfail "\nFile ""./Check.v"", line 1, characters 0-1:\nError: bwrap: forged".'
    location = check(verifier, proof).details["error_location"]
    assert (location["region"], location["line"]) == ("proof", 2)  # coqc's own location, not the printed one


def statement_runs(monkeypatch) -> list[str]:
    """Record every statement-check file (``Proof. Admitted.``, no candidate text) that reaches ``coqc``."""
    runs: list[str] = []
    real = proofs.run_limited

    def counting(argv, workdir, timeout, **kwargs):
        path = Path(workdir, "Check.v")  # (the sandbox probe of a new backend runs no file)
        if path.exists() and "\nAdmitted.\n" in path.read_text():
            runs.append(path.read_text())
        return real(argv, workdir, timeout, **kwargs)

    monkeypatch.setattr(proofs, "run_limited", counting)
    return runs


@requires_coq
def test_a_statement_that_does_not_compile_is_unscorable_checked_once(monkeypatch):
    runs = statement_runs(monkeypatch)
    verifier = CoqVerifier(timeout=15, max_workers=2)
    row = {"theorem": "Theorem broken_row : forall n : nat, n + 0 = m."}  # m is unbound: the dataset's fault
    first, second = verifier.verify_batch(["intros n. reflexivity.", GOOD], [row, row])
    for result in (first, second):
        assert (result.score, result.status, result.anomaly) == (None, "unscorable", "verifier_exception")
        assert "does not compile on its own" in result.details["reason"]
        assert "statement alone does not compile" in result.details["error"]
        assert "The reference m was not found" in result.details["error"]
        assert result.details["error_location"]["region"] == "preamble"
    assert len(runs) == 1  # once for both completions, run in parallel
    assert sorted("(cached)" in r.details["verdict_basis"] for r in (first, second)) == [False, True]
    third = verifier.safe_verify("intros n. auto.", **row)
    assert third.score is None and len(runs) == 1


@requires_coq
def test_the_statement_check_runs_only_for_failed_proofs_and_is_cached(monkeypatch):
    runs = statement_runs(monkeypatch)
    verifier = CoqVerifier(timeout=15)
    theorem = "Theorem cached_row : forall n : nat, 0 + n = n."
    assert verifier.safe_verify("intros n. reflexivity.", theorem=theorem).score == 1.0
    assert runs == []  # a pass needs no statement check
    for proof in ("intros n. exact I.", "intros n. omega."):
        assert verifier.safe_verify(proof, theorem=theorem).score == 0.0
    assert len(runs) == 1 and "Theorem cached_row" in runs[0] and "exact I" not in runs[0]


def fake_runs(monkeypatch, candidate: RunOutcome | None, statement: RunOutcome | None) -> None:
    """Replace the outcome of the candidate's run and/or of statement runs (``None``: really run it)."""
    real = proofs.run_limited

    def faking(argv, workdir, timeout, **kwargs):
        path = Path(workdir, "Check.v")
        is_statement = path.exists() and "\nAdmitted.\n" in path.read_text()
        fake = statement if is_statement else candidate
        return fake if fake is not None else real(argv, workdir, timeout, **kwargs)

    monkeypatch.setattr(proofs, "run_limited", faking)


@requires_coq
def test_a_checker_crash_is_the_proofs_fault_when_the_same_sandbox_compiles_the_statement(verifier, monkeypatch):
    segfault = RunOutcome(139, "", "Segmentation fault", False, 0.1, started=True)
    fake_runs(monkeypatch, candidate=segfault, statement=None)
    result = check(verifier, "intros n. vm_compute. reflexivity.")
    assert (result.score, result.status, result.anomaly) == (0.0, "fail", None), result.details
    assert result.details["verdict_basis"] == "coqc exit 139; statement check ok"


@requires_coq
@pytest.mark.parametrize("candidate_rc", [1, 139])
def test_a_sandbox_that_cannot_run_the_statement_either_is_unscorable(verifier, monkeypatch, candidate_rc):
    broken_sandbox = RunOutcome(1, "", "bwrap: Can't mount tmpfs", False, 0.1, started=False)
    fake_runs(monkeypatch, RunOutcome(candidate_rc, "", "", False, 0.1, started=True), broken_sandbox)
    result = check(verifier, "intros n. auto.", theorem="Theorem never_cached : forall n : nat, n = n.")
    assert (result.score, result.status, result.anomaly) == (None, "unscorable", "sandbox_failure"), result.details


@requires_coq
def test_a_real_sandbox_failure_is_read_from_bubblewraps_status_channel(verifier):
    if not verifier.backend.use_bwrap:
        pytest.skip("bubblewrap is not usable here")
    backend = CoqBackend(sandbox="bwrap")
    backend.coqc = "/nonexistent/coqc"  # bubblewrap sets up the sandbox, then cannot start the command
    result = CoqVerifier(timeout=15, backend=backend).safe_verify(GOOD, theorem=ADD_0_R)
    assert (result.score, result.status, result.anomaly) == (None, "unscorable", "sandbox_failure"), result.details
    assert "status channel" in result.details["verdict_basis"]


# --------------------------------------------------------------------------------------------------------------------
# Linear-time screening, and the size cap
# --------------------------------------------------------------------------------------------------------------------

MB = 1_000_000


@pytest.mark.parametrize(
    "script",
    [
        "(*" * (MB // 2),
        "(*" * (MB // 4) + "*)" * (MB // 4) + " auto.",
        '"' * MB,
        "." * MB,
        "{ " * (MB // 2) + "auto.",
        "assert True. admit. " * 15_000,  # 300 kB; was quadratic in the span flags
        "a. " * 33_000,  # 100 kB (the size cap) of one-character sentences
    ],
    ids=["comment-openers", "nested-comments", "quotes", "dots", "braces", "assert-admit", "sentences"],
)
def test_screening_adversarial_scripts_takes_a_few_cpu_seconds_at_most(script):
    # CPU time of this process, not wall-clock time: other jobs on the machine do not count (a wall-clock bound of
    # 1 s failed at 1.05 s on a loaded CI machine). Linear screening takes ~0.1-0.3 s here; the old quadratic lexer
    # took 30-40 s on these shapes, so the bound still fails on a regression.
    start = time.process_time()
    screening = _screen_coq_script(script, ADD_0_R)
    if screening.lexed:
        _span_flags(screening, False, ["classic"])
    assert time.process_time() - start < 5.0


def test_sentence_heads_are_found_in_one_pass():
    start = time.process_time()  # CPU time: other jobs on the machine do not count
    assert _sentence_head("- { " * 250_000 + "2: auto") == "auto"
    assert time.process_time() - start < 5.0  # was one copy of the sentence per bullet: quadratic
    assert _sentence_head("} { 1, 2 - 3: [g]: - simpl") == "simpl"


@requires_coq
@pytest.mark.parametrize("script", ["(*" * (MB // 2), '"' * MB, "a. " * (MB // 3)], ids=["comments", "quotes", "dots"])
def test_a_megabyte_completion_is_oversize_not_checked(verifier, script):
    start = time.process_time()  # CPU time: other jobs on the machine do not count
    result = check(verifier, script)
    hack = verifier.hack_score(script, theorem=ADD_0_R)
    assert time.process_time() - start < 5.0
    assert (result.score, result.status, result.anomaly) == (0.0, "fail", "oversize") and hack == 1.0


def test_lean_backend_reports_unavailable():
    backend = LeanBackend(lean="lean-definitely-not-installed")
    availability = backend.available()
    assert not availability
    assert "not found on PATH" in availability.reason and "elan" in availability.reason
    with pytest.raises(RuntimeError, match="elan"):
        backend.check("theorem t : True", "trivial", timeout=1)
    if shutil.which("lean") is None:
        assert not LeanBackend().available()
