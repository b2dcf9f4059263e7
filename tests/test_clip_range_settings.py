"""What to set for the clip range and the ratio level, checked as a whole (issue 46): a partial override that puts
ε_low and ε_high on different scales is refused naming both; the token-level variant of our loss is one field
(``policy_loss="token_clip"``); ``importance_sampling_level="token"`` alone keeps TRL's meaning (a drop-in) and
says how to get either loss; the config's warnings are attributed to this package."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

from trl_loo_gspo.config import LooGspoConfigWarning
from trl_loo_gspo.config.objective import CLIP_SCALE_FACTOR

from .test_config import make


@pytest.mark.parametrize(
    "fields",
    [
        dict(epsilon=0.2, epsilon_high=4e-4),  # --epsilon 0.2 over a recipe's GSPO pair
        dict(epsilon=0.5, epsilon_high=1e-4),  # the Python example
        dict(epsilon_high=0.2),  # with our loss's GSPO default ε_low 3e-4
        dict(loss_type="grpo", epsilon=0.002, epsilon_high=0.28),  # TRL's clipped losses read a range around 1 too
    ],
)
def test_a_clip_range_on_two_scales_is_refused_naming_both_bounds(fields):
    with pytest.raises(ValueError, match=r"epsilon=.* and epsilon_high=.* are \d+x apart") as refused:
        make(**fields)
    text = str(refused.value)
    assert "Set both epsilon and epsilon_high" in text
    if "epsilon" not in fields:
        assert "(the default for this objective)" in text


@pytest.mark.parametrize(
    "fields",
    [
        dict(),  # GSPO's 3e-4 / 4e-4
        dict(epsilon=0.2, epsilon_high=0.28),  # DAPO's clip-higher
        dict(epsilon=0.01),  # ε_high follows ε_low
        dict(epsilon=0.02, epsilon_high=0.02 * CLIP_SCALE_FACTOR),  # the widest accepted
        dict(loss_type="cispo", epsilon_high=5.0),  # an absolute cap, not a range around 1
        dict(loss_type="sapo"),
    ],
)
def test_clip_ranges_on_one_scale_are_accepted(fields):
    objective = make(**fields).objective
    assert objective.epsilon_low > 0 and objective.epsilon_high > 0


def test_the_cli_refuses_a_partial_override_of_a_recipes_pair_in_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "trl_loo_gspo", "train", "--config", "recipes/math-lora.yaml", "--epsilon", "0.2",
         "--model_name_or_path", str(tmp_path / "m"), "--dataset_name", str(tmp_path / "d.jsonl"),
         "--output_dir", str(tmp_path / "out"), "--bf16", "false", "--dtype", "float32"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "epsilon=0.2 (set) and epsilon_high=0.0004 (set) are 500x apart" in errors[0]
    assert "Traceback" not in result.stderr


def test_the_token_level_variant_of_our_loss_is_one_field():
    objective = make(policy_loss="token_clip").objective
    assert (objective.loss_type, objective.uses_own_loss, objective.importance_sampling_level) == (
        "loo_gspo",
        True,
        "token",
    )
    assert (objective.epsilon_low, objective.epsilon_high) == (0.2, 0.2)  # a token ratio's scale, not GSPO's
    assert make(policy_loss="token_clip", importance_sampling_level="token").objective == objective
    assert make(loss_type="loo_gspo", importance_sampling_level="token").objective == objective
    with pytest.raises(ValueError, match="policy_loss='token_clip' contradicts importance_sampling_level='sequence'"):
        make(policy_loss="token_clip", importance_sampling_level="sequence")
    with pytest.raises(ValueError, match="policy_loss='response_clip' contradicts importance_sampling_level='token'"):
        make(policy_loss="response_clip", importance_sampling_level="token")


def test_a_token_level_ratio_alone_is_trls_loss_and_the_notice_names_both_choices():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        objective = make(importance_sampling_level="token").objective
    assert objective.loss_type == "dapo" and not objective.uses_own_loss  # as GRPOConfig: a drop-in
    notices = [w for w in caught if issubclass(w.category, LooGspoConfigWarning)]
    assert len(notices) == 1, [str(w.message) for w in caught]
    text = str(notices[0].message)
    assert "set policy_loss='token_clip'" in text and "for TRL's token-level loss set loss_type='dapo'" in text
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make(policy_loss="token_clip")  # our loss asked for: no notice
    assert not [w for w in caught if issubclass(w.category, LooGspoConfigWarning)]


def test_the_readmes_what_to_set_lines_construct_what_they_say():
    """The one-line configurations of README.md's "What to set" build, and resolve to the objective each names."""
    import ast
    import textwrap
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("## What to set", 1)[1].split("\n## ", 1)[0]
    block = textwrap.dedent(section.split("```python\n", 1)[1].split("```", 1)[0])
    calls = [node for node in ast.walk(ast.parse(block)) if isinstance(node, ast.Call)]
    built = [make(**{kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}).objective for call in calls]
    assert [(o.loss_type, o.policy_loss, o.importance_sampling_level) for o in built] == [
        ("grpo", None, "token"),
        ("loo_gspo", "token_clip", "token"),
        ("loo_gspo", "response_clip", "sequence"),
    ]


def _widening_notices(**fields) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make(**fields)
    return [str(w.message) for w in caught if "entropy_k_max" in str(w.message)]


@pytest.mark.parametrize(
    "fields, epsilon_high",
    [
        (dict(epsilon=6.5e-3, epsilon_high=8.67e-3), 8.67e-3),  # the fair study's tuned full: 4e-4 is 4.6% of it
        (dict(loss_type="grpo"), 0.2),  # TRL's clipped losses read the same widened epsilon_high
    ],
)
def test_entropy_feedback_too_small_for_its_clip_range_is_named_with_a_scaled_bound(fields, epsilon_high):
    (notice,) = _widening_notices(entropy_feedback=True, **fields)
    assert f"epsilon_high={epsilon_high:g}" in notice and "entropy_k_max=0.0004" in notice
    assert f"entropy_k_max={epsilon_high:.2g}, entropy_step={epsilon_high / 8:.2g}" in notice


@pytest.mark.parametrize(
    "fields",
    [
        dict(entropy_feedback=True),  # GSPO's scale: k_max 4e-4 may double epsilon_high 4e-4
        dict(entropy_feedback=True, epsilon=6.5e-3, epsilon_high=8.67e-3, entropy_k_max=9e-4),  # above 10%
        dict(
            entropy_feedback=True,
            epsilon=6.5e-3,
            epsilon_high=8.67e-3,
            clip_target_fraction=0.1,  # epsilon_high moves
            steps_per_generation=4,
        ),
        dict(epsilon=6.5e-3, epsilon_high=8.67e-3),  # feedback off
    ],
)
def test_entropy_feedback_at_its_clip_scale_gives_no_notice(fields):
    assert _widening_notices(**fields) == []
