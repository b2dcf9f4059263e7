"""Registration, the model card and Hub pushes of ``LooGspoTrainer`` (method §2): a mixin.

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

from accelerate.utils import DistributedType, broadcast_object_list, is_peft_model
from datasets import IterableDataset
from huggingface_hub import CommitOperationDelete, HfApi

from .hub import card_sections
from .registration import content_fingerprint, experiment_record, split_overlap, weights_fingerprint

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


class PublishingMixin:
    """Mixed into ``LooGspoTrainer`` (needs ``transformers.Trainer``'s methods further down the MRO)."""

    _merge_for_push = False
    data_source: dict | None = None  # dataset name/revision/split, recorded at registration
    experiment_record: dict | None = None
    _weights_hashed = False
    _base_weights_sha256: str | None = None

    def _init_publishing(self) -> None:
        self._fingerprints: dict[str, dict | None] = {}  # content fingerprints by datasets fingerprint

    def _check_merge_support(self) -> None:
        """The same refusal as :func:`merge_refusal` before ``Trainer.__init__``, on what was really set up."""
        sharded = self.is_fsdp_enabled or self.accelerator.distributed_type == DistributedType.DEEPSPEED
        lora = is_peft_model(self.accelerator.unwrap_model(self.model))
        refusal = merge_refusal(self.args.hub_merge_adapter, lora, sharded)
        if refusal is not None:
            raise ValueError(refusal)

    def train(self, *args, **kwargs):
        if self.args.register_experiment:
            self.register_experiment()
        return super().train(*args, **kwargs)

    def register_experiment(self) -> dict | None:
        """Refuse overlapping splits, then write ``experiment.json`` and return the record (method §2).

        The record is built on the main process only; the other processes take part in the refusal (raised on every
        process) and in gathering sharded weights for the hash (ZeRO-3, FSDP2), and get ``None``. The base weights
        are hashed once per trainer and each dataset's content once per ``datasets`` fingerprint, so a later
        ``train()`` call (a resume, a second run) costs no second pass over the weights or the rows."""
        main = self.accelerator.is_main_process
        refusal = broadcast_object_list([self._split_overlap_refusal() if main else None])[0]
        if refusal is not None:
            raise ValueError(refusal)
        if not self._weights_hashed:  # every process: sharded weights are gathered collectively
            self._base_weights_sha256 = weights_fingerprint(self.accelerator.unwrap_model(self.model), main)
            self._weights_hashed = True
        if not main:
            return None
        weights, task = self._base_weights_sha256, self.args.experiment_task
        record = experiment_record(self, task=task, weights_sha256=weights, fingerprint=self._fingerprint)
        if self.data_source is not None:
            record["data"]["source"] = self.data_source
        self.experiment_record = record
        if self.args.should_save:
            os.makedirs(self.args.output_dir, exist_ok=True)
            with open(os.path.join(self.args.output_dir, "experiment.json"), "w") as f:
                json.dump(record, f, indent=2, default=str)
        return record

    def _split_overlap_refusal(self) -> str | None:
        """Why the validation split is not independent of the training split (method §5.2), or ``None``."""
        validation = self.eval_dataset
        named = validation.items() if isinstance(validation, dict) else [("eval_dataset", validation)]
        for name, split in named:
            if split is None or isinstance(split, IterableDataset) or isinstance(self.train_dataset, IterableDataset):
                continue
            if "prompt" not in split.column_names or "prompt" not in self.train_dataset.column_names:
                continue
            shared = split_overlap(self.train_dataset, split)
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

    def create_model_card(self, *args, **kwargs) -> None:
        """TRL's model card plus the method and its flags, the validation figures, the registration record (method §2)
        and the four sources (:func:`trl_loo_gspo.hub.card_sections`)."""
        super().create_model_card(*args, **kwargs)
        path = os.path.join(self.args.output_dir, "README.md")
        if not self.is_world_process_zero() or not os.path.exists(path):
            return
        history = next(
            (cb.history for cb in self.callback_handler.callbacks if type(cb).__name__ == "ValidationCallback"), []
        )
        with open(path, "a") as f:
            f.write(card_sections(self.args, history, self.experiment_record))

    # ------------------------------------------------------------------ Hub pushes
    def push_to_hub(self, *args, **kwargs):
        """``Trainer.push_to_hub`` (adapter or full model, tokenizer, model card, ``experiment.json``); with
        ``hub_merge_adapter`` the LoRA adapter is merged into the base weights first (the adapter is kept in
        ``adapter/``), and the adapter files that checkpoint pushes (``hub_strategy="every_save"``) left at the
        repository root are deleted (``from_pretrained(repo)`` would otherwise load the base model plus that
        checkpoint's adapter instead of the merged weights). A merged push therefore always waits for its upload."""
        self._merge_for_push = self.args.hub_merge_adapter
        try:
            result = super().push_to_hub(*args, **kwargs)
        finally:
            self._merge_for_push = False
        if self.args.hub_merge_adapter and self.is_world_process_zero():
            if hasattr(result, "result"):  # blocking=False: a future of the upload
                result = result.result()
            self._delete_root_adapter()
        return result

    def _delete_root_adapter(self) -> None:
        api = HfApi(token=self.args.hub_token)
        revision = self.args.hub_revision
        files = set(api.list_repo_files(self.hub_model_id, revision=revision))
        stale = sorted(files & set(ROOT_ADAPTER_FILES))
        if stale:
            api.create_commit(
                self.hub_model_id,
                [CommitOperationDelete(path_in_repo=name) for name in stale],
                commit_message="Remove the checkpoint adapter from the root (the merged model is there)",
                revision=revision,
            )

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        super().save_model(output_dir, _internal_call)
        if self._merge_for_push and self.args.should_save:
            self._save_merged(output_dir or self.args.output_dir)

    def _save_merged(self, output_dir: str) -> None:
        """Write the merged full model to ``output_dir`` and move the adapter files to ``output_dir/adapter``."""
        model = self.accelerator.unwrap_model(self.model)
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
