"""Hub pushes: the real ``push_to_hub`` path (TRL/transformers) up to ``huggingface_hub``'s network calls.

``HfApi.create_repo`` and ``HfApi.upload_folder`` are replaced by recorders (the Hub cannot be reached from here);
the recorder applies huggingface_hub's own ``filter_repo_objects`` with the ignore patterns transformers passes, so
the recorded files are exactly the ones that would be uploaded. The uploaded adapter / merged model is then loaded
back from those bytes and must reproduce the trained policy's logits.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import pytest
import torch
from huggingface_hub.utils import filter_repo_objects
from peft import PeftModel
from transformers import AutoModelForCausalLM

from trl_loo_gspo.hub import SOURCES
from trl_loo_gspo.train import build_trainer, make_parser, run

from .recipe_fixtures import REPO, cpu_overrides, data_override, save_tiny_model

pytestmark = pytest.mark.slow

RECIPE = REPO / "recipes" / "math-lora.yaml"


@pytest.fixture
def fake_hub(monkeypatch):
    uploads: list[dict] = []

    def create_repo(self, repo_id, token=None, private=None, exist_ok=False, **_):
        return SimpleNamespace(repo_id=repo_id)

    def upload_folder(self, *, repo_id, folder_path, ignore_patterns=None, allow_patterns=None, **kwargs):
        root = Path(folder_path)
        relative = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
        kept = list(filter_repo_objects(relative, allow_patterns=allow_patterns, ignore_patterns=ignore_patterns))
        uploads.append({"repo_id": repo_id, "files": {name: (root / name).read_bytes() for name in kept}, **kwargs})
        return SimpleNamespace(commit_url=f"https://huggingface.co/{repo_id}/commit/0")

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", create_repo)
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", upload_folder)
    return uploads


def _args(tmp_path, *extra):
    model_dir = save_tiny_model(tmp_path / "tiny")
    argv = ["--config", str(RECIPE), *cpu_overrides(model_dir, tmp_path / "out"), *data_override(RECIPE, tmp_path)]
    argv += ["--push_to_hub", "true", "--hub_model_id", "someone/tiny-loo-gspo", *extra]
    return make_parser().parse_args_and_config(args=argv), model_dir


def _materialise(files: dict[str, bytes], directory: Path) -> Path:
    for name, data in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)
    return directory


def _logits(model, tokenizer) -> torch.Tensor:
    batch = tokenizer(["12+34=", "7+8="], return_tensors="pt", padding=True)
    with torch.no_grad():
        return model(**batch).logits


def test_push_uploads_adapter_tokenizer_card_and_record(tmp_path, fake_hub):
    (script_args, training_args, model_args), model_dir = _args(tmp_path, "--eval_every_tokens", "20")
    trainer = run(script_args, training_args, model_args)
    assert len(fake_hub) == 1  # one upload at the end, not one per save
    upload = fake_hub[0]
    assert upload["repo_id"] == "someone/tiny-loo-gspo"
    files = upload["files"]
    for name in ("adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "README.md", "experiment.json"):  # fmt: skip
        assert name in files, sorted(files)
    assert "model.safetensors" not in files and not any(name.startswith("checkpoint-") for name in files)

    card = files["README.md"].decode()
    front = card.split("---")[1]
    for tag in ("trl", "trl-loo-gspo", "rlvr"):
        assert re.search(rf"^- {re.escape(tag)}$", front, re.M), front
    assert "## Method: LOO-GSPO" in card and "| `advantage_estimator` | `loo` |" in card
    assert "| `dynamic_sampling` | `True` |" in card
    history = next(cb.history for cb in trainer.callback_handler.callbacks if hasattr(cb, "history"))
    assert len(history) >= 2  # before training and at least one token checkpoint
    assert f"| {history[-1]['eval/pass_at_1']:.4f} | {history[-1]['eval/pass_rate']:.4f} |" in card
    block = card.split("## Experiment registration (method §2)")[1].split("```json\n")[1].split("\n```")[0]
    assert json.loads(block) == json.loads(files["experiment.json"])
    sources = card.split("## Sources")[1]
    assert all(text in sources for text in SOURCES) and "http" not in sources  # four sources, link-free

    # the uploaded adapter reproduces the trained policy
    pushed = _materialise(files, tmp_path / "pushed")
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    reloaded = PeftModel.from_pretrained(base, pushed).eval()
    policy = trainer.accelerator.unwrap_model(trainer.model).eval()
    torch.testing.assert_close(_logits(reloaded, trainer.processing_class), _logits(policy, trainer.processing_class))


def test_push_with_merged_adapter_uploads_a_full_model(tmp_path, fake_hub):
    (script_args, training_args, model_args), _ = _args(tmp_path, "--hub_merge_adapter", "true")
    trainer = run(script_args, training_args, model_args)
    files = fake_hub[-1]["files"]
    assert "model.safetensors" in files and "config.json" in files
    assert "adapter_config.json" not in files  # the root is a plain model ...
    assert {"adapter/adapter_config.json", "adapter/adapter_model.safetensors"} <= set(files)  # ... adapter kept
    pushed = _materialise(files, tmp_path / "pushed")
    merged = AutoModelForCausalLM.from_pretrained(pushed).eval()
    assert not isinstance(merged, PeftModel)
    policy = trainer.accelerator.unwrap_model(trainer.model).eval()
    assert isinstance(policy, PeftModel)  # the trainer's own model keeps its adapter
    torch.testing.assert_close(_logits(merged, trainer.processing_class), _logits(policy, trainer.processing_class))


def test_merge_needs_a_lora_run(tmp_path, fake_hub):
    (script_args, training_args, model_args), _ = _args(tmp_path, "--hub_merge_adapter", "true", "--use_peft", "false")
    with pytest.raises(ValueError, match="hub_merge_adapter"):
        build_trainer(script_args, training_args, model_args)
