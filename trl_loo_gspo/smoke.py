"""A tiny local run: ``python -m trl_loo_gspo.smoke`` trains a few LooGspoTrainer steps on CPU and prints metrics.

Everything is built locally (character tokenizer, a small random Qwen2, ``a+b=`` prompts); nothing is downloaded.
The rewards are exact answers plus a small dense shaping term (fraction of digits), so that an untrained model's
groups have something to compare. It shows the trainer working end to end, not learning: the offline demo that
trains a warm-started policy to a higher held-out pass rate is ``trl-loo-gspo demo`` (a later release).
"""

from __future__ import annotations

import argparse
import os
import tempfile


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--output-dir", default=None, help="default: a temporary directory")
    cli = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    from rich.console import Console
    from rich.table import Table
    from transformers.trainer_callback import PrinterCallback

    from trl_loo_gspo import LooGspoConfig, LooGspoTrainer
    from trl_loo_gspo.tiny import (
        addition_dataset,
        char_tokenizer,
        digit_fraction_reward,
        exact_answer_reward,
        tiny_qwen2,
    )

    tokenizer = char_tokenizer()
    model = tiny_qwen2(tokenizer, hidden_size=64, num_hidden_layers=2)
    output_dir = cli.output_dir or tempfile.mkdtemp(prefix="loo-gspo-smoke-")
    args = LooGspoConfig(
        output_dir=output_dir,
        use_cpu=True,
        bf16=False,  # TRL defaults to bf16; without bf16 hardware it is several times slower on CPU
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        max_steps=cli.steps,
        per_device_train_batch_size=16,
        num_generations=8,
        max_completion_length=6,
        learning_rate=1e-3,
        reward_weights=[1.0, 0.1],
    )
    trainer = LooGspoTrainer(
        model=model,
        reward_funcs=[exact_answer_reward, digit_fraction_reward],
        args=args,
        train_dataset=addition_dataset(256),
        processing_class=tokenizer,
    )
    trainer.remove_callback(PrinterCallback)  # the table below replaces the raw log dicts
    trainer.train()

    columns = [
        "loss",
        "reward",
        "groups/frac_with_signal",
        "ratio/mean",
        "clip_ratio/region_answers",
        "entropy",
        "tokens/generated",
        "tokens/effective",
        "tokens/loss_denominator",
        "completions/clipped_ratio",
    ]
    records = [record for record in trainer.state.log_history if "loss" in record]
    table = Table(title=f"LooGspoTrainer smoke run: {cli.steps} steps, output in {output_dir}")
    table.add_column("metric")
    for record in records:
        table.add_column(f"step {record['step']}", justify="right")
    for name in columns:
        table.add_row(name, *(f"{record.get(name, float('nan')):.4g}" for record in records))
    Console().print(table)


if __name__ == "__main__":
    main()
