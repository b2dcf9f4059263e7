"""CoqVerifier span signals (method §6): one ``tactic`` span per proof sentence, goal counts, hack flags.

Tests that run ``coqc`` are skipped (with the reason) where Coq is not installed and marked ``slow``; the parser and
offset helpers are tested without Coq.
"""

import shutil
from pathlib import Path

import pytest

from trl_loo_gspo.verifiers.base import SpanSignal, VerifierResult
from trl_loo_gspo.verifiers.proofs import coq as proofs
from trl_loo_gspo.verifiers.proofs.coq import CoqVerifier, extract_proof_script
from trl_loo_gspo.verifiers.proofs.output import count_goals
from trl_loo_gspo.verifiers.proofs.script import _locate_proof_script

requires_coq = pytest.mark.skipif(
    shutil.which("coqc") is None, reason="coqc not installed (apt-get install -y coq); CI installs it"
)

ADD_0_R = "Theorem add_0_r : forall n : nat, n + 0 = n."
BULLETED = [
    "intros n.",
    "induction n as [|n IH].",
    "- reflexivity.",
    "- simpl.",
    "rewrite IH.",
    "reflexivity.",
]
COMPLETION = (
    f"Induction on n.\n```coq\n{ADD_0_R}\nProof.\n  {BULLETED[0]} {BULLETED[1]}\n  (* base case *) {BULLETED[2]}\n"
    f"  {BULLETED[3]}\n    {BULLETED[4]}  {BULLETED[5]}\nQed.\n```\nThat closes both cases."
)


@pytest.fixture(scope="module")
def verifier() -> CoqVerifier:
    return CoqVerifier(timeout=15, emit_spans=True)


def spans_of(verifier: CoqVerifier, completion: str, **columns) -> tuple[VerifierResult, list[SpanSignal]]:
    columns.setdefault("theorem", ADD_0_R)
    result = verifier.safe_verify(completion, **columns)
    assert result.spans is not None, result.details
    return result, result.spans


def goals(spans: list[SpanSignal]) -> list[tuple]:
    return [(s.meta["goals_before"], s.meta["goals_after"]) for s in spans]


# --------------------------------------------------------------------------------------------------------------------
# Without Coq: the Show parser and the offset of the extracted script
# --------------------------------------------------------------------------------------------------------------------


def test_count_goals_parses_every_show_format():
    unfocused = "\n\n*** Unfocused goals:\n\ngoal 3 is:\n (exists n : nat, n = 0) /\\ True"
    complete = "This subproof is complete, but there are some unfocused goals.\nFocus next goal with bullet +.\n\n"
    assert count_goals("1 goal\n  \n  n : nat\n  ============================\n  n + 0 = n") == 1
    assert count_goals("No more goals.") == 0
    assert count_goals("All the remaining goals are on the shelf.\n\n1 goal\n\ngoal 1 is:\n nat") == 0
    assert count_goals("2 goals\n  \n  ============================\n  True\n\ngoal 2 is:\n True" + unfocused) == 3
    assert count_goals("1 focused goal (shelved: 1)\n  \n  ===\n  ?n = 0" + unfocused) == 2
    assert count_goals(complete + "2 goals\n\ngoal 1 is:\n True\ngoal 2 is:\n True") == 2
    assert count_goals('This subproof is complete, ...\nTry unfocusing with "}".\n\n1 goal\n\ngoal 1 is:\n T') == 1
    # lines that start inside a string literal of the goal are not read
    forged = '1 goal\n  \n  H : "\n*** Unfocused goals:\ngoal 2 is:\ngoal 3 is:" = ""\n  ====\n  True'
    assert count_goals(forged) == 1
    assert count_goals(forged + unfocused) == 2
    assert count_goals("") is None and count_goals(None) is None
    assert count_goals("Some unexpected output") is None


def test_locate_proof_script_offsets():
    for completion in [COMPLETION, "  auto.  ", "x\n```coq\n  a.\n```\ny\n```coq\n\n b. \n```", "```\n c.\n```"]:
        script, offset = _locate_proof_script(completion)
        assert script == extract_proof_script(completion)
        assert completion[offset : offset + len(script)] == script
    assert _locate_proof_script("x\n```coq\n  a.\n```\ny\n```coq\n\n b. \n```") == ("b.", 29)


# --------------------------------------------------------------------------------------------------------------------
# With Coq
# --------------------------------------------------------------------------------------------------------------------


@requires_coq
@pytest.mark.slow
def test_correct_bulleted_proof(verifier):
    result, spans = spans_of(verifier, COMPLETION)
    assert (result.score, result.status) == (1.0, "pass"), result.details
    assert [COMPLETION[s.start : s.end] for s in spans] == BULLETED  # restatement, Proof., Qed. and comments excluded
    assert [s.key for s in spans] == [f"tactic:{k}" for k in range(6)]
    assert {s.kind for s in spans} == {"tactic"}
    assert [s.value for s in spans] == [1.0] * 6
    assert all(s.meta["accepted"] and s.flags == () for s in spans)
    # intros keeps 1 goal; induction splits it in 2; bullet 1 closes one; the last tactic closes the proof
    assert goals(spans) == [(1, 1), (1, 2), (2, 1), (1, 1), (1, 1), (1, 0)]
    assert [s.meta["delta_goals"] for s in spans] == [0, 1, -1, 0, 0, -1]


@requires_coq
@pytest.mark.slow
def test_braces_and_selectors_belong_to_the_next_sentence(verifier):
    completion = "intros n. destruct n. { reflexivity. } { simpl. f_equal. apply plus_n_O. }"
    result, spans = spans_of(verifier, completion)
    assert result.score == 0.0  # apply plus_n_O needs symmetry: fails at sentence 5
    texts = ["intros n.", "destruct n.", "{ reflexivity.", "} { simpl.", "f_equal.", "apply plus_n_O.", "}"]
    assert [completion[s.start : s.end] for s in spans] == texts
    assert [s.value for s in spans] == [1.0] * 5 + [0.0, 0.0]
    assert goals(spans)[:5] == [(1, 1), (1, 2), (2, 1), (1, 1), (1, 1)]
    result, spans = spans_of(verifier, completion.replace("apply plus_n_O", "symmetry. apply plus_n_O"))
    assert result.score == 1.0 and [s.value for s in spans] == [1.0] * 8
    assert goals(spans)[-2:] == [(1, 0), (0, 0)]  # the closing brace: nothing left
    completion = "intros n. destruct n. 2: { simpl. f_equal. symmetry. apply plus_n_O. } reflexivity."
    result, spans = spans_of(verifier, completion)
    assert result.score == 1.0 and [completion[s.start : s.end] for s in spans][2::4] == [
        "2: { simpl.",
        "} reflexivity.",
    ]
    assert goals(spans) == [(1, 1), (1, 2), (2, 2), (2, 2), (2, 2), (2, 1), (1, 0)]


@requires_coq
@pytest.mark.slow
def test_error_at_sentence_3_fails_it_and_everything_after(verifier):
    completion = "intros n.\ninduction n.\nreflexivity.\nreflexivity.\nsimpl.\nauto."
    result, spans = spans_of(verifier, completion)
    assert (result.score, result.status) == (0.0, "fail")
    assert result.details["error_location"]["line"] == 4  # the outcome check agrees on the failing sentence
    assert [s.value for s in spans] == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert [s.meta["accepted"] for s in spans] == [True, True, True, False, False, False]
    assert goals(spans) == [(1, 1), (1, 2), (2, 1), (1, None), (None, None), (None, None)]
    assert spans[3].meta["delta_goals"] is None


@requires_coq
@pytest.mark.slow
def test_admit_closing_a_goal_is_flagged_unsound(verifier):
    completion = "intros n. induction n as [|n IH]. - reflexivity. - admit."
    result, spans = spans_of(verifier, completion)
    assert (result.score, result.status) == (0.0, "rejected")  # the score is the screening's, as before
    admit = spans[3]
    assert completion[admit.start : admit.end] == "- admit."
    assert (admit.value, admit.meta["accepted"]) == (0.0, True)
    assert "unsound" in admit.flags
    assert (admit.meta["goals_before"], admit.meta["goals_after"], admit.meta["delta_goals"]) == (1, 0, -1)
    # every span of a rejected completion is 0 and flagged, though Coq ran them
    assert [s.value for s in spans] == [0.0] * 4
    assert all("rejected" in s.flags for s in spans)
    assert goals(spans)[:3] == [(1, 1), (1, 2), (2, 1)]


@requires_coq
@pytest.mark.slow
def test_new_hypothesis_flags(verifier):
    _, spans = spans_of(verifier, "intros n. assert (H : n + 0 = n) by admit. exact H.")
    assert spans[1].flags == ("rejected", "unsound", "new_hypothesis")
    assert spans[1].meta["accepted"] and spans[2].meta["goals_after"] == 0
    _, spans = spans_of(verifier, "intros n. cut (n + 0 = n). - auto. - admit.")
    assert [s.flags for s in spans] == [("rejected",), ("rejected", "new_hypothesis"), ("rejected",)] + [
        ("rejected", "unsound")
    ]
    assert goals(spans)[1] == (1, 2)
    # declarations are rejected and never run: no goal counts
    result, spans = spans_of(verifier, "- Hypothesis h : False. destruct h.")
    assert result.status == "rejected" and spans[0].flags == ("rejected", "new_hypothesis")
    assert [s.value for s in spans] == [0.0, 0.0] and goals(spans) == [(None, None), (None, None)]
    assert spans[1].meta["accepted"] is False


@requires_coq
@pytest.mark.slow
def test_forged_markers_do_not_change_goal_counts(verifier):
    plain = "intros n. induction n. reflexivity. simpl. rewrite <- plus_n_O. reflexivity."
    forged = (
        'intros n. idtac "No more goals.". induction n. idtac "7 goals". reflexivity. '
        'idtac "*** Unfocused goals:". idtac "goal 5 is:". simpl. rewrite <- plus_n_O. reflexivity.'
    )
    _, clean = spans_of(verifier, plain)
    result, spans = spans_of(verifier, forged)
    assert result.score == 1.0
    assert goals(clean) == [(1, 1), (1, 2), (2, 1), (1, 1), (1, 1), (1, 0)]
    assert goals(spans) == [(1, 1), (1, 1), (1, 2), (2, 2), (2, 1), (1, 1), (1, 1), (1, 1), (1, 1), (1, 0)]
    # a goal whose text holds a string made to look like Show output
    fake = '"\n*** Unfocused goals:\n\ngoal 2 is:\n True\ngoal 3 is:\nNo more goals."'
    completion = f"intros n. assert (H : {fake} = {fake}) by reflexivity. split. exact I. exact I."
    columns = {
        "theorem": "Theorem t : nat -> True /\\ True.",
        "preamble": "Require Import String. Open Scope string_scope.",
    }
    result, spans = spans_of(verifier, completion, **columns)
    assert result.score == 1.0, result.details
    assert goals(spans) == [(1, 1), (1, 1), (1, 2), (2, 1), (1, 0)]
    # writing a probe file directly is impossible: Redirect is rejected and such a script is never run
    result, spans = spans_of(verifier, 'Redirect "goals_0" Show. intros n. auto.')
    assert result.status == "rejected" and goals(spans) == [(None, None)] * 3


@requires_coq
@pytest.mark.slow
def test_grouped_sentences_and_unparsable_tails(verifier):
    columns = {"theorem": "Theorem t : forall x : R, x.(f) = f x.", "preamble": "Record R := { f : nat }."}
    result, spans = spans_of(verifier, "intros x. exact (eq_refl x.(f)).", **columns)
    assert result.score == 1.0 and [s.value for s in spans] == [1.0] * 3  # `x.(f)`: one Coq sentence, two spans
    assert goals(spans) == [(1, 1), (1, None), (None, 0)]
    result, spans = spans_of(verifier, "intros n.\ninduction n; auto")  # no final period
    assert result.score == 0.0 and [s.value for s in spans] == [1.0, 0.0]


@requires_coq
@pytest.mark.slow
def test_disallowed_axiom_and_no_check_are_flagged(verifier):
    result, spans = spans_of(
        verifier, "intros P. apply classic.", theorem="Theorem lem : forall P : Prop, P \\/ ~ P.",
        preamble="Require Import Classical.",
    )  # fmt: skip
    assert result.details["disallowed_axioms"] == ["classic"]
    assert [s.value for s in spans] == [1.0, 0.0] and spans[1].flags == ("disallowed_axiom",)
    assert spans[1].meta["accepted"] and goals(spans) == [(1, 1), (1, 0)]
    result, spans = spans_of(verifier, "intros n. exact_no_check (eq_refl n).")
    assert result.score == 0.0 and spans[1].flags == ("unsound",) and spans[1].meta["accepted"]


@requires_coq
@pytest.mark.slow
def test_edge_cases_no_script_unlexable_unscorable_timeout(verifier):
    assert spans_of(verifier, "```coq\n```")[1] == []
    result, spans = spans_of(verifier, "```coq\nintros n. (* unterminated")
    assert result.status == "rejected" and len(spans) == 1
    assert (spans[0].start, spans[0].end, spans[0].value, spans[0].flags) == (7, 32, 0.0, ("rejected", "unlexable"))
    result, spans = spans_of(verifier, "intros n. auto.", preamble="Require Import NoSuchLibrary.")
    assert result.score is None and spans == [] and "spans_error" in result.details
    fast = CoqVerifier(timeout=1.5, backend=verifier.backend, emit_spans=True)
    result, spans = spans_of(fast, "intros n. do 1000000000 idtac. auto.")
    assert (result.score, result.anomaly) == (0.0, "timeout")
    assert [s.meta["accepted"] for s in spans] == [True, False, False]


@requires_coq
@pytest.mark.slow
def test_emit_spans_off_runs_nothing_extra_and_scores_are_unchanged(verifier, monkeypatch):
    calls: list[str] = []
    real = proofs.run_limited

    def counting(argv, workdir, timeout, **kwargs):
        calls.append(Path(workdir, "Check.v").read_text())
        return real(argv, workdir, timeout, **kwargs)

    monkeypatch.setattr(proofs, "run_limited", counting)
    off = CoqVerifier(timeout=15, backend=verifier.backend)
    assert off.emit_spans is False and verifier.emit_spans is True
    result = off.safe_verify(COMPLETION, theorem=ADD_0_R)
    assert result.score == 1.0 and result.spans is None and len(calls) == 1 and "Show" not in calls[0]
    calls.clear()
    assert verifier.safe_verify(COMPLETION, theorem=ADD_0_R).score == 1.0 and len(calls) == 2
    rows = [
        (COMPLETION, {}),
        ("intros n.\nreflexivity.", {}),
        ("intros n.", {}),
        ("intros n. admit.", {}),
        ("Axiom cheat : False. destruct cheat.", {}),
        ("```coq\n```", {}),
        ("intros P. apply classic.", {"theorem": "Theorem lem : forall P : Prop, P \\/ ~ P.",
                                      "preamble": "Require Import Classical."}),
        ("intros n. auto.", {"preamble": "Require Import NoSuchLibrary."}),
    ]  # fmt: skip
    for completion, columns in rows:
        columns = {"theorem": ADD_0_R, **columns}
        plain, spanned = off.safe_verify(completion, **columns), verifier.safe_verify(completion, **columns)
        assert (plain.score, plain.status, plain.anomaly) == (spanned.score, spanned.status, spanned.anomaly)
        assert plain.spans is None and isinstance(spanned.spans, list)
