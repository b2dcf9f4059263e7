"""Worker for tests/test_distributed.py: run under `torchrun --nproc_per_node 2` (gloo, CPU).

Trains one optimizer step of LooGspoTrainer from a saved tiny model with the deterministic rollout and writes the
parameter update (rank 0) to --out.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from tests.helpers import base_kwargs, make_rollout, parity_reward, train_dataset  # noqa: E402
from trl_loo_gspo import LooGspoConfig, LooGspoTrainer  # noqa: E402
from trl_loo_gspo.tiny import char_tokenizer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--overrides", required=True, help="JSON dict of LooGspoConfig overrides")
    parser.add_argument("--expect-processes", type=int, default=2)
    cli = parser.parse_args()

    tokenizer = char_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(cli.model_dir, dtype=torch.float32)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    args = LooGspoConfig(**base_kwargs(cli.out + ".run", **json.loads(cli.overrides)))
    trainer = LooGspoTrainer(
        model=model,
        reward_funcs=[parity_reward],
        args=args,
        train_dataset=train_dataset(),
        processing_class=tokenizer,
        rollout_func=make_rollout(tokenizer, args.num_generations),
    )
    # A distributed test that silently ran one process would check nothing.
    assert trainer.accelerator.num_processes == cli.expect_processes, trainer.accelerator.num_processes
    trainer.train()
    unwrapped = trainer.accelerator.unwrap_model(trainer.model)
    delta = {k: (v.detach() - before[k]) for k, v in unwrapped.named_parameters()}
    if trainer.accelerator.is_main_process:
        torch.save(
            {
                "delta": delta,
                "loss": trainer.state.log_history[0]["loss"],
                "processes": trainer.accelerator.num_processes,
            },
            cli.out,
        )


if __name__ == "__main__":
    main()
