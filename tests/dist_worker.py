"""Worker for tests/test_distributed.py: run under `torchrun --nproc_per_node 2` (gloo, CPU), or alone for the
one-process references.

Runs every case of ``--cases`` (a JSON list of ``{"name", "overrides", "task"}``) in turn in this one launch: each
trains LooGspoTrainer from the saved tiny model with the deterministic rollout and writes the parameter update and
the logs (rank 0) to ``--out/<name>.pt``. One launch per file instead of one per case: the process start (torch,
TRL, gloo) is what a launch costs.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from tests.helpers import (  # noqa: E402
    base_kwargs,
    controlled_dataset,
    controlled_reward,
    controlled_rollout,
    make_rollout,
    multistep_rollout,
    parity_reward,
    train_dataset,
)
from trl_loo_gspo import LooGspoConfig, LooGspoTrainer  # noqa: E402
from trl_loo_gspo.demo.multistep import MultiStepTask, MultiStepVerifier  # noqa: E402
from trl_loo_gspo.demo.tiny import char_tokenizer  # noqa: E402


def run_case(model_dir: str, out: str, overrides: dict, task: str, expect_processes: int) -> None:
    tokenizer = char_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    args = LooGspoConfig(**base_kwargs(out + ".run", **overrides))
    if task == "parity":
        reward, dataset, rollout = parity_reward, train_dataset(), make_rollout(tokenizer, args.num_generations)
    elif task == "controlled":  # always-right / always-wrong / mixed prompts, for dynamic sampling
        reward, dataset, rollout = controlled_reward, controlled_dataset(), controlled_rollout(tokenizer, 4)
    else:  # multi-step answers with span signals, for process feedback
        dataset = MultiStepTask(train_problems=32, validation_problems=4, seed=1).splits()[0]
        reward, rollout = MultiStepVerifier(emit_spans=True), multistep_rollout(tokenizer)
    trainer = LooGspoTrainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=rollout,
    )
    # A distributed test that silently ran one process would check nothing.
    assert trainer.accelerator.num_processes == expect_processes, trainer.accelerator.num_processes
    trainer.train()
    unwrapped = trainer.accelerator.unwrap_model(trainer.model)
    delta = {k: (v.detach() - before[k]) for k, v in unwrapped.named_parameters()}
    # every process's clip range at the end (the controller must move it alike on every rank)
    epsilons = [[trainer.epsilon_low, trainer.epsilon_high]]
    epsilons = trainer.accelerator.gather(torch.tensor(epsilons, dtype=torch.float64)).tolist()
    if trainer.accelerator.is_main_process:
        torch.save(
            {
                "delta": delta,
                "loss": trainer.state.log_history[0]["loss"],
                "processes": trainer.accelerator.num_processes,
                "logs": trainer.state.log_history,
                "prompts": list(trainer._logs["prompt"]),
                "epsilons": epsilons,
            },
            out,
        )
    trainer.accelerator.wait_for_everyone()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--out", required=True, help="folder: one <name>.pt per case")
    parser.add_argument("--cases", required=True, help='JSON list of {"name", "overrides", "task"}')
    parser.add_argument("--expect-processes", type=int, default=2)
    cli = parser.parse_args()
    for case in json.loads(cli.cases):
        out = os.path.join(cli.out, f"{case['name']}.pt")
        run_case(cli.model_dir, out, case["overrides"], case["task"], cli.expect_processes)
    # Tear the process group down explicitly once every rank is done: letting interpreter exit race the gloo
    # threads occasionally aborts a rank ("terminate called without an active exception").
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
