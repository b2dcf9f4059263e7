"""Registration, the model card and Hub pushes of ``LooGspoTrainer`` (method §2): a component the trainer owns,
called from its ``train``, ``create_model_card``, ``push_to_hub`` and ``save_model``.

* ``train`` registers the experiment first (``register_experiment``: refuse overlapping splits, write
  ``experiment.json``);
* ``create_model_card`` appends the method, its flags, the validation figures and the registration record to TRL's
  card;
* ``push_to_hub`` / ``save_model`` can merge a LoRA adapter into the base weights for the push
  (``hub_merge_adapter``).
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

from accelerate.utils import DistributedType, broadcast_object_list, is_peft_model
from datasets import IterableDataset
from huggingface_hub import CommitOperationDelete, HfApi

from ..records.card import card_sections
from ..records.registration import content_fingerprint, experiment_record, split_overlap, weights_fingerprint

# What a PEFT adapter puts at the top of a folder; at a repository root they make ``from_pretrained`` load an adapter.
ROOT_ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")


def merge_refusal(merge: bool, lora: bool, sharded: bool) -> str | None:
    """Why ``hub_merge_adapter`` cannot be honoured, or ``None``. Decided before ``Trainer.__init__`` (which creates
    the Hub repository when ``push_to_hub`` is set) from what the launch asks for, and again after it."""
    if not merge:
        return None
    if not lora:
        return (
            "hub_merge_adapter=True needs a LoRA run (peft_config / --use_peft); this run trains the full model, "
            "which is pushed as it is."
        )
    if sharded:
        return (
            "hub_merge_adapter=True is not supported with FSDP or DeepSpeed (the weights are sharded): push the "
            "adapter, then merge it on one process: `PeftModel.from_pretrained(base, repo).merge_and_unload()`."
        )
    return None


class Publisher:
    """The run's registration record, its card text and the merge-for-push of a LoRA adapter."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.merge_for_push = False
        self.experiment_record: dict | None = None
        self._weights_hashed = False
        self._base_weights_sha256: str | None = None
        self._fingerprints: dict[str, dict | None] = {}  # content fingerprints by datasets fingerprint

    def check_merge_support(self) -> None:
        """The same refusal as :func:`merge_refusal` before ``Trainer.__init__``, on what was really set up."""
        trainer = self.trainer
        sharded = trainer.is_fsdp_enabled or trainer.accelerator.distributed_type == DistributedType.DEEPSPEED
        lora = is_peft_model(trainer.accelerator.unwrap_model(trainer.model))
        refusal = merge_refusal(trainer.args.hub_merge_adapter, lora, sharded)
        if refusal is not None:
            raise ValueError(refusal)

    def register_experiment(self) -> dict | None:
        """Refuse overlapping splits, then write ``experiment.json`` and return the record (method §2).

        The record is built on the main process only; the other processes take part in the refusal (raised on every
        process) and in gathering sharded weights for the hash (ZeRO-3, FSDP2), and get ``None``. The base weights
        are hashed once per trainer and each dataset's content once per ``datasets`` fingerprint, so a later
        ``train()`` call (a resume, a second run) costs no second pass over the weights or the rows."""
        trainer = self.trainer
        main = trainer.accelerator.is_main_process
        refusal = broadcast_object_list([self._split_overlap_refusal() if main else None])[0]
        if refusal is not None:
            raise ValueError(refusal)
        if not self._weights_hashed:  # every process: sharded weights are gathered collectively
            self._base_weights_sha256 = weights_fingerprint(trainer.accelerator.unwrap_model(trainer.model), main)
            self._weights_hashed = True
        if not main:
            return None
        weights, task = self._base_weights_sha256, trainer.args.experiment_task
        record = experiment_record(trainer, task=task, weights_sha256=weights, fingerprint=self._fingerprint)
        if trainer.data_source is not None:
            record["data"]["source"] = trainer.data_source
        self.experiment_record = record
        if trainer.args.should_save:
            os.makedirs(trainer.args.output_dir, exist_ok=True)
            with open(os.path.join(trainer.args.output_dir, "experiment.json"), "w") as f:
                json.dump(record, f, indent=2, default=str)
        return record

    def _split_overlap_refusal(self) -> str | None:
        """Why the validation split is not independent of the training split (method §5.2), or ``None``."""
        train, validation = self.trainer.train_dataset, self.trainer.eval_dataset
        named = validation.items() if isinstance(validation, dict) else [("eval_dataset", validation)]
        for name, split in named:
            if split is None or isinstance(split, IterableDataset) or isinstance(train, IterableDataset):
                continue
            if "prompt" not in split.column_names or "prompt" not in train.column_names:
                continue
            shared = split_overlap(train, split)
            if shared:
                return (
                    f"{name} shares {len(shared)} of its {len(split)} prompts with train_dataset (first: "
                    f"{split[shared[0]]['prompt']!r}). The validation set must be independent of training "
                    "(docs/method.md §5.2): remove those rows, or set register_experiment=False to skip this check."
                )
        return None

    def _fingerprint(self, dataset) -> dict | None:
        """:func:`content_fingerprint`, cached by the dataset's ``datasets`` fingerprint (which changes with any
        transform of the rows)."""
        key = getattr(dataset, "_fingerprint", None)
        if key is None:
            return content_fingerprint(dataset)
        if key not in self._fingerprints:
            self._fingerprints[key] = content_fingerprint(dataset)
        return self._fingerprints[key]

    def append_card_sections(self, history: list[dict]) -> None:
        """Append the method as it trained, its flags, the validation figures, the registration record (method §2)
        and the sources to the card TRL wrote (:func:`trl_loo_gspo.records.card.card_sections`)."""
        trainer = self.trainer
        path = os.path.join(trainer.args.output_dir, "README.md")
        if not trainer.is_world_process_zero() or not os.path.exists(path):
            return
        with open(path, "a") as f:
            f.write(card_sections(trainer.args, history, self.experiment_record, objective=trainer.objective))

    def delete_root_adapter(self) -> None:
        """After a merged push: the adapter files that checkpoint pushes (``hub_strategy="every_save"``) left at the
        repository root (``from_pretrained(repo)`` would otherwise load the base model plus that adapter)."""
        args = self.trainer.args
        api = HfApi(token=args.hub_token)
        files = set(api.list_repo_files(self.trainer.hub_model_id, revision=args.hub_revision))
        stale = sorted(files & set(ROOT_ADAPTER_FILES))
        if stale:
            api.create_commit(
                self.trainer.hub_model_id,
                [CommitOperationDelete(path_in_repo=name) for name in stale],
                commit_message="Remove the checkpoint adapter from the root (the merged model is there)",
                revision=args.hub_revision,
            )

    def save_merged(self, output_dir: str) -> None:
        """Write the merged full model to ``output_dir`` and move the adapter files to ``output_dir/adapter``."""
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        if not is_peft_model(model):
            raise ValueError("hub_merge_adapter=True needs a PEFT (LoRA) model; this run trains the full model.")
        adapter_dir = os.path.join(output_dir, "adapter")
        model.save_pretrained(adapter_dir)
        for name in os.listdir(adapter_dir):
            stale = os.path.join(output_dir, name)
            if os.path.isfile(stale):
                os.remove(stale)
        # A copy, so that the trainer's model keeps its adapter (costs one more copy of the weights while saving).
        merged = copy.deepcopy(model).merge_and_unload()
        merged.save_pretrained(output_dir)
        del merged
