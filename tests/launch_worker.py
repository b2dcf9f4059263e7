"""Worker for tests/test_launch_checks.py: build a LooGspoTrainer under a multi-process launch and train one step.

Prints one line ``LAUNCH {json}`` per rank (processes, distributed type) after construction.
"""

import argparse
import json
import os
import sys

# the repository root replaces this script's folder (tests/) on the path: tests/ holds packages (tests/vllm_engine)
# whose names must not shadow installed ones
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from tests.helpers import base_kwargs, make_model_and_tokenizer, parity_trainer  # noqa: E402
from trl_loo_gspo import LooGspoConfig, LooGspoTrainer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--overrides", default="{}", help="JSON dict of LooGspoConfig overrides")
    cli = parser.parse_args()
    model, tokenizer = make_model_and_tokenizer(seed=3)
    rank = os.environ.get("RANK", "0")
    args = LooGspoConfig(**base_kwargs(f"{cli.out}/rank{rank}", **json.loads(cli.overrides)))
    trainer = parity_trainer(LooGspoTrainer, model, tokenizer, args)
    accelerator = trainer.accelerator
    state = {"processes": accelerator.num_processes, "type": accelerator.distributed_type.value, "rank": rank}
    print("LAUNCH " + json.dumps(state), flush=True)
    trainer.train()
    accelerator.wait_for_everyone()
    # Destroy the process group before the interpreter exits: a gloo rank that exits with the group alive can
    # abort (SIGABRT, "terminate called without an active exception") after training finished (seen once in CI).
    accelerator.end_training()


if __name__ == "__main__":
    main()
