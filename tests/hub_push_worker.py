"""The subprocess half of ``tests/test_hub_push.py``: train and push like ``trl-loo-gspo train``, then load the push
back from the Hub stand-in (``tests/hub_server.py``) and measure logits.

Run as ``python -m tests.hub_push_worker JOBS.json`` with ``HF_ENDPOINT`` pointing at the server, ``HF_TOKEN`` set
and ``HF_HUB_DISABLE_XET=1``. JOBS.json is ``{"runs": {name: run}, "out": path}``; the runs share this process (torch,
transformers and peft are imported once). A run is ``argv`` (``trl-loo-gspo train`` arguments) and ``cache_dir``
(an empty folder: every pushed file loaded back is downloaded into it from the server), or ``argv`` and
``build_only`` (construct the trainer and record the ``ValueError`` it raises). ``out`` receives (``torch.save``)
per run: the logits of the base model, the trained policy and the model(s) loaded back from the server (``pushed``;
``pushed_adapter`` for the ``adapter/`` folder of a merged push), whether the merged model loaded as a ``PeftModel``,
whether the tokenizer loaded back encodes like the run's, the validation history and the repo id; or ``error`` for a
``build_only`` run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_loo_gspo.experiment.build import build_trainer, make_parser, run

PROMPTS = ["12+34=", "7+8=", "What is 5 times 6?"]


def logits(model: torch.nn.Module, tokenizer: Any) -> torch.Tensor:
    batch = tokenizer(PROMPTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        return model.eval()(**batch).logits


def train_push_and_load_back(argv: list[str], cache_dir: str) -> dict[str, Any]:
    script_args, training_args, model_args = make_parser().parse_args_and_config(args=argv)
    trainer = run(script_args, training_args, model_args)  # trains, saves, pushes (the CLI's code path)
    tokenizer = trainer.processing_class
    policy = trainer.accelerator.unwrap_model(trainer.model)

    def base() -> torch.nn.Module:  # the untrained weights, from the local model folder the run started from
        return AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path, dtype=torch.float32)

    repo_id = trainer.hub_model_id
    result: dict[str, Any] = {
        "repo_id": repo_id,
        "base": logits(base(), tokenizer),
        "trained": logits(policy, tokenizer),
        "history": next((cb.history for cb in trainer.callback_handler.callbacks if hasattr(cb, "history")), []),
    }
    # Load back FROM THE SERVER: a repo id (no such local folder: the worker runs in an empty directory) and an empty
    # cache, so every file comes over HTTP through hf_hub_download.
    if training_args.hub_merge_adapter:
        merged = AutoModelForCausalLM.from_pretrained(repo_id, cache_dir=cache_dir, dtype=torch.float32)
        result["pushed_is_peft"] = isinstance(merged, PeftModel)
        result["pushed"] = logits(merged, tokenizer)
        adapter = PeftModel.from_pretrained(base(), repo_id, subfolder="adapter", cache_dir=cache_dir)
        result["pushed_adapter"] = logits(adapter, tokenizer)
    else:
        result["pushed"] = logits(PeftModel.from_pretrained(base(), repo_id, cache_dir=cache_dir), tokenizer)
    pushed_tokenizer = AutoTokenizer.from_pretrained(repo_id, cache_dir=cache_dir, padding_side="left")
    result["tokenizer_reproduced"] = pushed_tokenizer(PROMPTS)["input_ids"] == tokenizer(PROMPTS)["input_ids"]
    return result


def build_error(argv: list[str]) -> dict[str, Any]:
    try:
        build_trainer(*make_parser().parse_args_and_config(args=argv))
    except ValueError as error:
        return {"error": str(error)}
    return {"error": None}


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    results = {}
    for name, job in spec["runs"].items():
        if job.get("build_only"):
            results[name] = build_error(job["argv"])
        else:
            results[name] = train_push_and_load_back(job["argv"], job["cache_dir"])
    torch.save(results, spec["out"])


if __name__ == "__main__":
    main(sys.argv[1])
