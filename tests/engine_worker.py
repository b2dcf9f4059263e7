"""Worker for tests/test_engines.py: one optimizer step of LooGspoTrainer under an engine, then validation and save.

Started by ``accelerate launch --config_file recipes/accelerate/<engine>.yaml --num_processes 2 --mixed_precision no``
(two gloo processes on CPU, ``use_cpu=True``) or, for the one-process reference (``--engine single``), by plain
``python``. Writes, from the main process, ``update-<variant>.pt`` (the full trained state dict, the update and the
distributed type) right after the step and ``validation-<variant>.pt`` once the validation passes are done, so a
failing validation does not hide the update.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import sys
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
# Run as a script, Python puts tests/ first on sys.path, where a folder could shadow a library (a tests/vllm/ package
# made TRL see an uninstalled vLLM): import from the repository root instead.
sys.path[:] = [os.path.dirname(HERE)] + [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import torch  # noqa: E402
from accelerate import PartialState  # noqa: E402
from accelerate.utils import DistributedType  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from tests.helpers import base_kwargs, parity_trainer  # noqa: E402
from trl_loo_gspo import LooGspoConfig, LooGspoTrainer  # noqa: E402
from trl_loo_gspo.demo.tiny import addition_dataset, char_tokenizer  # noqa: E402
from trl_loo_gspo.trainer.validation import ValidationCallback  # noqa: E402

EXPECTED_TYPE = {
    "single": DistributedType.NO,
    "zero2": DistributedType.DEEPSPEED,
    "zero3": DistributedType.DEEPSPEED,
    "fsdp2": DistributedType.FSDP,
}
# validation sets: name -> (rows, generate batch size); 1 row on 2 processes leaves one without a row, 129 rows
# with batch size 64 give the processes 65 and 64 rows, i.e. 2 and 1 generate calls without padding
VALIDATION_SETS = {"rows8": (8, 4), "rows1": (1, 64), "rows129": (129, 64)}
VALIDATION_TIMEOUT_S = 180  # all three sets take seconds


def force_fsdp_branch_on_cpu() -> None:
    """Make accelerate take its FSDP branch in a CPU gloo launch (test worker only, never in the library).

    accelerate 1.15 sets ``DistributedType.FSDP`` only when ``PartialState._prepare_backend`` reports a multi-device
    launch type (MULTI_GPU, MULTI_XPU, ...); with ``cpu=True`` it reports MULTI_CPU, and ``fsdp2.yaml`` then silently
    runs as plain DDP. Here the backend still comes out as gloo with the device pinned to CPU, but the launch is
    reported as MULTI_GPU; PartialState only opens the process group itself for MULTI_CPU, so it is opened here.
    """
    original = PartialState._prepare_backend

    def prepare_backend(self, cpu: bool = False, sagemaker_dp: bool = False, backend: str | None = None):
        chosen, kind = original(self, cpu, sagemaker_dp, backend)
        if kind != DistributedType.MULTI_CPU:
            return chosen, kind
        if not torch.distributed.is_initialized():
            torch.distributed.init_process_group(backend="gloo")  # env:// from the launcher
        self.device = torch.device("cpu")  # set_device() then keeps it (no cuda device is looked up)
        return "gloo", DistributedType.MULTI_GPU

    PartialState._prepare_backend = prepare_backend


def parity_verifier(prompts, completions, answer, **_):
    """Deterministic score of prompt and completion text (about half pass, so the figures depend on which rows are
    counted and on the answers); None (unscorable) when the answer is 'x'."""
    rows = zip(prompts, completions, answer, strict=True)
    return [None if a == "x" else float(sum(map(ord, p + c)) % 2 == 0) for p, c, a in rows]


def validation_set(rows: int) -> Dataset:
    data = addition_dataset(rows, seed=5).to_list()
    if rows > 1:
        data[1]["answer"] = "x"  # an unscorable problem (on the second process)
    return Dataset.from_list(data)


def lora_config():
    from peft import LoraConfig

    return LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")


def run(cli: argparse.Namespace, variant: str, out: Path) -> None:
    tokenizer = char_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(cli.model_dir, dtype=torch.float32)
    args = LooGspoConfig(**base_kwargs(str(out / f"run-{variant}"), **json.loads(cli.overrides)))
    torch.manual_seed(11)  # the LoRA adapters are initialised in the trainer: the same on every process and run
    peft_config = lora_config() if variant == "lora" else None
    trainer = parity_trainer(LooGspoTrainer, model, tokenizer, args, peft_config=peft_config)
    accelerator = trainer.accelerator
    # A test that silently ran one process, or plain DDP instead of the engine, would check nothing.
    assert accelerator.num_processes == cli.expect_processes, accelerator.num_processes
    assert accelerator.distributed_type == EXPECTED_TYPE[cli.engine], accelerator.distributed_type
    before = {k: v.detach().clone() for k, v in accelerator.unwrap_model(trainer.model).state_dict().items()}
    trainer.train()
    trained = accelerator.get_state_dict(trainer.model_wrapped)  # gathered (ZeRO-3, FSDP2 full state dict)
    trainer.save_model(str(out / f"saved-{variant}"))
    if accelerator.is_main_process:
        trained = {k: v.detach().to("cpu", torch.float32).clone() for k, v in trained.items()}
        torch.save(
            {
                "trained": trained,
                "delta": {k: trained[k] - before[k] for k in trained},
                "loss": trainer.state.log_history[0]["loss"],
                "processes": accelerator.num_processes,
                "distributed_type": str(accelerator.distributed_type),
                "fsdp_sharded": any(type(p).__name__ == "DTensor" for p in trainer.model.parameters()),
            },
            out / f"update-{variant}.pt",
        )
    # Processes whose collectives do not match hang (gloo's timeout is 30 min): seconds are enough for validation,
    # so fail fast, printing where every thread of each process is stuck.
    faulthandler.dump_traceback_later(VALIDATION_TIMEOUT_S, exit=True)
    results = {}
    for name, (rows, batch_size) in VALIDATION_SETS.items():
        callback = ValidationCallback(
            trainer, validation_set(rows), parity_verifier, every_tokens=10**9, samples=2, batch_size=batch_size
        )
        results[name] = callback.evaluate()
    faulthandler.cancel_dump_traceback_later()
    if accelerator.is_main_process:
        torch.save(results, out / f"validation-{variant}.pt")
    accelerator.wait_for_everyone()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", choices=sorted(EXPECTED_TYPE), required=True)
    parser.add_argument("--variants", default="full", help="comma-separated: full, lora (one trainer each)")
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--overrides", default="{}", help="JSON dict of LooGspoConfig overrides")
    parser.add_argument("--expect-processes", type=int, default=2)
    cli = parser.parse_args()
    if cli.engine == "fsdp2":
        force_fsdp_branch_on_cpu()
    for variant in cli.variants.split(","):
        run(cli, variant, Path(cli.out))
    # Tear the process group down once every rank is done (an exit racing the gloo threads can abort a rank).
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
