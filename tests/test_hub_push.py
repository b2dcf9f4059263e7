"""Hub pushes over real HTTP: ``trl-loo-gspo train --push_to_hub`` against a loopback Hub (``tests/hub_server.py``).

Nothing of ``huggingface_hub`` is patched: the runs talk to the server through the real client (create repo,
preupload, LFS batch + upload + verify, ndjson commit), and the pushed adapter / merged model is loaded back from the
server (``hf_hub_download`` behind ``from_pretrained``) into an empty cache. ``huggingface_hub`` reads ``HF_ENDPOINT``
(and ``HF_HUB_DISABLE_XET``) once, at import, into ``huggingface_hub.constants``, and transformers' ``Trainer`` calls
its shared ``HfApi`` without an ``endpoint``; this process imported it long ago, so training, pushing and loading
back run in a subprocess (``tests/hub_push_worker.py``, all runs in one process: the imports cost more than a run)
started with ``HF_ENDPOINT`` set, the way a user points the client at another Hub.

The policy must really move: the recipe's ``warmup_steps: 10`` with ``constant_with_warmup`` gives learning rate 0
on step 1, so a one-step run pushes the base model and "the push reproduces the trained policy" compares the base
model with itself (max |Δlogit| 0.000). These runs override the warmup (``--warmup_steps 0``) with a high learning
rate and check that the trained logits differ from the base model's by far more than the reproduction tolerance.

Two library defects found this way have tests here: a merged push after checkpoint pushes kept the checkpoint
adapter at the repo root (so ``from_pretrained(repo)`` loaded base + that adapter, never the merged weights), and a
refused merge left an empty repository behind (the refusal came after ``Trainer.__init__`` created it).
``test_hub_server_speaks_the_client_protocol`` checks the server itself on the calls a run does not make.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from trl_loo_gspo.records.card import SOURCES

from .hub_server import HubServer
from .recipe_fixtures import REPO, cpu_overrides, data_override, save_tiny_model

RECIPE = REPO / "recipes" / "math-lora.yaml"
REPO_ID = "someone/tiny-loo-gspo"
# Step 1 trains at this rate (no warmup): one Adam step moves every LoRA B entry by about 1e-2.
MOVING = ["--warmup_steps", "0", "--learning_rate", "1e-2"]
# The trained policy's logits must differ from the base model's by at least this much (max |Δ|); the reproduction
# check (torch.testing.assert_close, float32: atol 1e-5, rtol 1.3e-6) is 5000 times tighter.
MOVED = 0.05
RUNS = {  # name: (repo id, extra arguments of `trl-loo-gspo train`); each run starts from its own tiny model
    "every_save": (REPO_ID, ["--hub_strategy", "every_save", "--save_strategy", "steps", "--save_steps", "1",
                             "--max_steps", "3", "--eval_every_tokens", "20", *MOVING]),
    "merged": (f"{REPO_ID}-merged", ["--hub_merge_adapter", "true", *MOVING]),
    "merged_every_save": (f"{REPO_ID}-merged-ckpt", ["--hub_merge_adapter", "true", "--hub_strategy", "every_save",
                                                     "--save_strategy", "steps", "--save_steps", "1", *MOVING]),
    "merge_without_lora": (f"{REPO_ID}-full", ["--hub_merge_adapter", "true", "--use_peft", "false"]),
}  # fmt: skip


def _client_env(hub: HubServer, root: Path) -> dict[str, str]:
    """The environment of a subprocess whose huggingface_hub talks to ``hub``, as a user would point it elsewhere."""
    env = {
        **os.environ,
        "HF_ENDPOINT": hub.url,
        "HF_TOKEN": "hf_test_token",  # any bearer token: the server accepts it, the client needs one to write
        "HF_HUB_DISABLE_XET": "1",  # plain LFS, which the server implements
        "HF_HOME": str(root / "hf_home"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "TRL_EXPERIMENTAL_SILENCE": "1",
        "OMP_NUM_THREADS": "1",  # a tiny model: more threads only contend for a shared CPU (10x slower steps)
    }
    for offline in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        env.pop(offline, None)
    for no_proxy in ("NO_PROXY", "no_proxy"):  # a machine's HTTP(S)_PROXY must not catch the loopback server
        env[no_proxy] = ",".join(filter(None, [os.environ.get(no_proxy), "127.0.0.1"]))
    return env


@pytest.fixture(scope="module")
def pushed(tmp_path_factory) -> Iterator[tuple[HubServer, dict[str, dict[str, Any]], Path]]:
    """Start the Hub stand-in and run every run of ``RUNS`` in ONE subprocess (the imports cost more than a run).

    Returns the server (its repos, commits, LFS objects and request log), the worker's results per run, and the
    folder holding each run's ``out`` (output_dir) and ``downloads`` (the cache it loaded the push back into).
    """
    root = tmp_path_factory.mktemp("hub_push")
    runs = {}
    for name, (repo_id, extra) in RUNS.items():
        model_dir, work = save_tiny_model(root / name / "tiny"), root / name
        argv = ["--config", str(RECIPE), *cpu_overrides(model_dir, work / "out"), *data_override(RECIPE, work)]
        argv += ["--push_to_hub", "true", "--hub_model_id", repo_id, *extra]
        runs[name] = {"argv": argv, "cache_dir": str(work / "downloads"), "build_only": name == "merge_without_lora"}
    (root / "spec.json").write_text(json.dumps({"runs": runs, "out": str(root / "results.pt")}))
    (root / "cwd").mkdir()  # empty: a repo id can only name a Hub repo, not a local folder
    with HubServer() as hub:
        env = _client_env(hub, root)
        command = [sys.executable, "-m", "tests.hub_push_worker", str(root / "spec.json")]
        done = subprocess.run(command, cwd=root / "cwd", env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
        yield hub, torch.load(root / "results.pt", weights_only=False), root


def _check_loaded_back(hub: HubServer, root: Path, name: str, *paths: str) -> None:
    """The run's push was read back over HTTP: the client asked the server for ``paths`` (a HEAD alone when the cache
    already holds the same content under another name) and the run's empty cache now holds them."""
    assert not hub.unhandled, f"the client used routes tests/hub_server.py lacks: {hub.unhandled}"
    repo_id = RUNS[name][0]
    for path in paths:
        pattern = rf"/{re.escape(repo_id)}/resolve/\w+/{re.escape(path)}"
        assert any(re.fullmatch(pattern, url) and ok == 200 for _, url, ok in hub.requests), path
        snapshot = root / name / "downloads" / f"models--{repo_id.replace('/', '--')}" / "snapshots"
        assert list(snapshot.glob(f"*/{path}")), path


def _assert_policy_moved_and_reproduced(result: dict[str, Any], pushed: str = "pushed") -> None:
    moved = (result["trained"] - result["base"]).abs().max().item()
    assert moved > MOVED, f"the trained policy is the base model (max |Δlogit| {moved:.3g}): the test proves nothing"
    torch.testing.assert_close(result[pushed], result["trained"])
    assert result["tokenizer_reproduced"]


@pytest.mark.slow
def test_push_every_save_uploads_adapter_checkpoints_card_and_record(pushed):
    hub, results, root = pushed
    result, output_dir = results["every_save"], root / "every_save" / "out"
    assert result["repo_id"] == REPO_ID
    commits = hub.repos[REPO_ID].commits
    titles = [commit.title for commit in commits]
    # every_save: a commit per checkpoint (a save is not pushed while the previous push is still running); the push
    # at the end commits what changed since the last one (the client skips unchanged files; nothing: no commit)
    steps = [f"Training in progress, step {step}" for step in (1, 2, 3)]
    assert titles[0] == "initial commit" and set(titles[1:]) <= {*steps, "End of training"}, titles
    assert titles[1:] == sorted(titles[1:], key=[*steps, "End of training"].index), titles
    progress = [commit for commit in commits if commit.title in steps]
    assert len(progress) >= 2, titles
    assert all("adapter_model.safetensors" in c.lfs and "adapter_config.json" in c.files for c in progress)
    weights = [c.files["adapter_model.safetensors"] for c in progress]
    assert len(set(weights)) == len(weights)  # each checkpoint pushed the adapter of its own step: the policy moved

    head = commits[-1]
    files = head.files
    for name in ("adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "README.md", "experiment.json"):  # fmt: skip
        assert name in files, sorted(files)
    assert "model.safetensors" not in files and not any(name.startswith("checkpoint-") for name in files)
    assert head.lfs == {"adapter_model.safetensors", "training_args.bin"} & set(files)  # weights went through LFS
    puts = [path for verb, path, status in hub.requests if verb == "PUT" and status == 200]
    assert f"/lfs/{hashlib.sha256(files['adapter_model.safetensors']).hexdigest()}" in puts
    # the server holds exactly the local output folder, less what Trainer.push_to_hub ignores ("_*", "checkpoint-*")
    local = {p.relative_to(output_dir).as_posix() for p in output_dir.rglob("*") if p.is_file()}
    local = {name for name in local if not name.startswith(("_", "checkpoint-"))}
    assert set(files) - {".gitattributes"} == local
    assert all(files[name] == (output_dir / name).read_bytes() for name in local)

    card = files["README.md"].decode()
    front = card.split("---")[1]
    for tag in ("trl", "trl-loo-gspo", "rlvr"):
        assert re.search(rf"^- {re.escape(tag)}$", front, re.M), front
    assert "## Method: LOO-GSPO" in card and "| `advantage_estimator` | `loo` |" in card
    assert "| `dynamic_sampling` | `True` |" in card
    history = result["history"]
    assert len(history) >= 2  # before training and at least one token checkpoint
    assert f"| {history[-1]['eval/pass_at_1']:.4f} | {history[-1]['eval/pass_rate']:.4f} |" in card
    block = card.split("## Experiment registration (method §2)")[1].split("```json\n")[1].split("\n```")[0]
    assert json.loads(block) == json.loads(files["experiment.json"])
    sources = card.split("## Sources")[1]
    assert all(text in sources for text in SOURCES) and "http" not in sources  # four sources, link-free

    # the adapter loaded back from the server reproduces the trained policy, which really moved
    _check_loaded_back(hub, root, "every_save", "adapter_config.json", "adapter_model.safetensors", "tokenizer.json")
    _assert_policy_moved_and_reproduced(result)


@pytest.mark.slow
def test_push_with_merged_adapter_uploads_a_full_model(pushed):
    hub, results, root = pushed
    result, repo_id = results["merged"], RUNS["merged"][0]
    commits = hub.repos[repo_id].commits
    assert [c.title for c in commits] == ["initial commit", "End of training"]  # no saves: one push, at the end
    files = commits[-1].files
    assert "model.safetensors" in commits[-1].lfs and "config.json" in files
    assert "adapter_config.json" not in files  # the root is a plain model ...
    assert {"adapter/adapter_config.json", "adapter/adapter_model.safetensors"} <= set(files)  # ... adapter kept
    _check_loaded_back(hub, root, "merged", "config.json", "model.safetensors", "adapter/adapter_model.safetensors")
    assert result["pushed_is_peft"] is False
    _assert_policy_moved_and_reproduced(result)  # the merged model from the server
    _assert_policy_moved_and_reproduced(result, "pushed_adapter")  # and the base model + its adapter/ folder


@pytest.mark.slow
def test_merged_push_after_checkpoint_pushes(pushed):
    hub, results, root = pushed
    result, repo_id = results["merged_every_save"], RUNS["merged_every_save"][0]
    titles = [c.title for c in hub.repos[repo_id].commits]
    removal = "Remove the checkpoint adapter from the root (the merged model is there)"
    assert titles == ["initial commit", "Training in progress, step 1", "End of training", removal]
    head = hub.head(repo_id)
    assert "model.safetensors" in head.lfs and "config.json" in head.files
    assert {"adapter/adapter_config.json", "adapter/adapter_model.safetensors"} <= set(head.files)
    _check_loaded_back(hub, root, "merged_every_save", "adapter/adapter_model.safetensors")
    _assert_policy_moved_and_reproduced(result, "pushed_adapter")


@pytest.mark.slow
def test_merged_push_after_checkpoint_pushes_leaves_a_plain_model_at_the_root(pushed):
    hub, results, root = pushed
    repo_id = RUNS["merged_every_save"][0]
    stale = {"adapter_config.json", "adapter_model.safetensors"} & set(hub.head(repo_id).files)
    assert not stale, f"checkpoint adapter files left next to the merged model: {sorted(stale)}"
    _check_loaded_back(hub, root, "merged_every_save", "model.safetensors")  # what from_pretrained(repo) must read


@pytest.mark.slow
def test_merge_needs_a_lora_run(pushed):
    _, results, _ = pushed
    assert "hub_merge_adapter" in (results["merge_without_lora"]["error"] or "")


@pytest.mark.slow
def test_refused_merge_creates_no_repo(pushed):
    hub, results, _ = pushed
    assert results["merge_without_lora"]["error"] is not None
    assert RUNS["merge_without_lora"][0] not in hub.repos


def test_hub_server_speaks_the_client_protocol(tmp_path):
    """The server answers what the client asks beyond a training run: an unchanged upload (skipped by the client),
    deletions, listings, repo info, snapshot_download, a download at an old commit, a missing file, a bad card."""
    with HubServer() as hub:
        command = [sys.executable, "-m", "tests.hub_client_check", str(tmp_path)]
        done = subprocess.run(command, cwd=tmp_path, env=_client_env(hub, tmp_path), capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-6000:]
    answers = json.loads((tmp_path / "answers.json").read_text())
    assert answers["urls"] == [f"{hub.url}/someone/files"] * 2  # the second create_repo: 409, exist_ok
    titles = [commit.title for commit in hub.repos["someone/files"].commits]
    assert titles == ["initial commit", "add files", "delete b", "delete notes"]  # "unchanged" made no commit
    assert answers["again"] == answers["first"] == hub.repos["someone/files"].commits[1].oid
    weights = hub.repos["someone/files"].commits[1].files["weights.safetensors"]
    assert hub.lfs_objects[hashlib.sha256(weights).hexdigest()] == weights
    assert answers["tree"] == {".gitattributes": False, "README.md": False, "weights.safetensors": True,
                               "notes": False, "notes/a.txt": False}  # fmt: skip
    assert answers["top"] == [".gitattributes", "README.md", "notes", "weights.safetensors"]
    assert answers["sha"] == hub.repos["someone/files"].commits[2].oid
    assert answers["siblings"] == [".gitattributes", "README.md", "notes/a.txt", "weights.safetensors"]
    assert answers["snapshot_equal"] == dict.fromkeys(("weights.safetensors", "README.md", "notes/a.txt"), True)
    assert answers["snapshot_has_b"] is False and answers["b_at_first_commit"] == "b"
    assert answers["missing"] == "EntryNotFoundError"
    assert answers["bad_card"].startswith("Invalid metadata in README.md")
    assert set(hub.head("someone/files").files) == {".gitattributes", "README.md", "weights.safetensors"}
    assert not hub.unhandled, hub.unhandled
