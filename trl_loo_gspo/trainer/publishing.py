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

from accelerate.utils import broadcast_object_list, is_peft_model
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


def split_overlap_refusal(train: Any, validation: Any) -> str | None:
    """Why the validation split (a dataset, a dict of several, or ``None``) is not independent of the training split
    (method §5.2), or ``None``."""
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


class Publisher:
    """The run's registration record, its card text and the merge-for-push of a LoRA adapter.

    It holds the run's values, never the trainer: the ``accelerator``, the ``model`` (unwrapped when read), the
    ``TrainingArguments`` (``args``: output folder, saving, Hub settings), the reward functions and their weights;
    the run plan, the datasets and the data source are passed when the experiment is registered."""

    def __init__(
        self, accelerator: Any, model: Any, args: Any, reward_funcs: list, reward_weights: list[float]
    ) -> None:
        self.accelerator, self.model, self.args = accelerator, model, args
        self.reward_funcs, self.reward_weights = list(reward_funcs), [float(w) for w in reward_weights]
        self.merge_for_push = False
        self.experiment_record: dict | None = None
        self._weights_hashed = False
        self._base_weights_sha256: str | None = None
        self._fingerprints: dict[str, dict | None] = {}  # content fingerprints by datasets fingerprint

    def _unwrapped(self) -> Any:
        return self.accelerator.unwrap_model(self.model)

    def register_experiment(
        self, plan: Any, train: Any, validation: Any, data_source: dict | None = None
    ) -> dict | None:
        """Refuse overlapping splits, then write ``experiment.json`` and return the record (method §2). ``plan``:
        the run's :class:`~trl_loo_gspo.trainer.run_plan.RunPlan` (recorded whole); ``train`` / ``validation``: the
        datasets (a dict of several validation sets); ``data_source``: the dataset name/revision/split when the CLI
        loaded it.

        The record is built on the main process only; the other processes take part in the refusal (raised on every
        process) and in gathering sharded weights for the hash (ZeRO-3, FSDP2), and get ``None``. The base weights
        are hashed once per trainer and each dataset's content once per ``datasets`` fingerprint, so a later
        ``train()`` call (a resume, a second run) costs no second pass over the weights or the rows."""
        main = self.accelerator.is_main_process
        refusal = broadcast_object_list([split_overlap_refusal(train, validation) if main else None])[0]
        if refusal is not None:
            raise ValueError(refusal)
        if not self._weights_hashed:  # every process: sharded weights are gathered collectively
            self._base_weights_sha256 = weights_fingerprint(self._unwrapped(), main)
            self._weights_hashed = True
        if not main:
            return None
        record = experiment_record(
            model=self._unwrapped(),
            args=self.args,
            plan=plan,
            train=train,
            validation=validation,
            reward_funcs=self.reward_funcs,
            reward_weights=self.reward_weights,
            processes=self.accelerator.num_processes,
            task=plan.records.experiment_task,
            weights_sha256=self._base_weights_sha256,
            fingerprint=self._fingerprint,
        )
        if data_source is not None:
            record["data"]["source"] = data_source
        self.experiment_record = record
        if self.args.should_save:
            os.makedirs(self.args.output_dir, exist_ok=True)
            with open(os.path.join(self.args.output_dir, "experiment.json"), "w") as f:
                json.dump(record, f, indent=2, default=str)
        return record

    def _fingerprint(self, dataset) -> dict | None:
        """:func:`content_fingerprint`, cached by the dataset's ``datasets`` fingerprint (which changes with any
        transform of the rows)."""
        key = getattr(dataset, "_fingerprint", None)
        if key is None:
            return content_fingerprint(dataset)
        if key not in self._fingerprints:
            self._fingerprints[key] = content_fingerprint(dataset)
        return self._fingerprints[key]

    def append_card_sections(self, plan: Any, beta: float, history: list[dict]) -> None:
        """Append the method as it trained (``plan``: the run plan; ``beta``: the KL coefficient), its flags, the
        validation figures, the registration record (method §2) and the sources to the card TRL wrote
        (:func:`trl_loo_gspo.records.card.card_sections`)."""
        path = os.path.join(self.args.output_dir, "README.md")
        if self.args.process_index != 0 or not os.path.exists(path):
            return
        args = self.args
        settings = {
            "beta": beta,
            "num_generations": args.num_generations,
            "max_completion_length": args.max_completion_length,
            "temperature": args.temperature,
            "learning_rate": args.learning_rate,
            **plan.flags(),
        }
        with open(path, "a") as f:
            f.write(card_sections(settings, history, self.experiment_record, objective=plan.objective))

    def delete_root_adapter(self, hub_model_id: str) -> None:
        """After a merged push: the adapter files that checkpoint pushes (``hub_strategy="every_save"``) left at the
        repository root (``from_pretrained(repo)`` would otherwise load the base model plus that adapter)."""
        args = self.args
        api = HfApi(token=args.hub_token)
        files = set(api.list_repo_files(hub_model_id, revision=args.hub_revision))
        stale = sorted(files & set(ROOT_ADAPTER_FILES))
        if stale:
            api.create_commit(
                hub_model_id,
                [CommitOperationDelete(path_in_repo=name) for name in stale],
                commit_message="Remove the checkpoint adapter from the root (the merged model is there)",
                revision=args.hub_revision,
            )

    def save_merged(self, output_dir: str) -> None:
        """Write the merged full model to ``output_dir`` and move the adapter files to ``output_dir/adapter``."""
        model = self._unwrapped()
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
