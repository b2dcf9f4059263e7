"""A local stand-in for a recipe's Hub model and dataset, for a machine that cannot reach the Hub (or has no GPU).

``trl-loo-gspo local-setup DIR`` writes a tiny Qwen2 with a character tokenizer (``DIR/model``, loaded by
``from_pretrained`` like a Hub checkpoint, with a chat template) and a JSONL file in the exact raw format of the
recipe's public dataset (``DIR/math.jsonl``: GSM8K's columns; ``DIR/code.jsonl``: MBPP's), so the recipe's dataset
mapper runs unchanged, and prints the ``trl-loo-gspo train`` command that trains the recipe on them on a CPU (the
LoRA settings and the method's flags of the recipe kept). The tests use the same files.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from .policy import _hf_progress_bars_off
from .tiny import char_tokenizer, tiny_qwen2

# Rows in the raw formats of openai/gsm8k and google-research-datasets/mbpp.
RAW_ROWS = {
    "math": [
        {"question": "Tom has 3 apples and buys 4 more. How many apples does he have?", "answer": "3+4=7\n#### 7"},
        {"question": "A box holds 12 eggs. How many eggs are in 100 boxes?", "answer": "12*100=1200\n#### 1,200"},
        {"question": "What is 5 times 6?", "answer": "5*6=30\n#### 30"},
        {"question": "What is 9 minus 2?", "answer": "9-2=7\n#### 7"},
    ],
    "code": [
        {
            "task_id": 1,
            "text": "Write a function to add two numbers.",
            "code": "def add(a, b):\n    return a + b",
            "test_list": ["assert add(1, 2) == 3", "assert add(0, 0) == 0"],
            "test_setup_code": "",
            "challenge_test_list": [],
        },
        {
            "task_id": 2,
            "text": "Write a function to double a number.",
            "code": "def double(x):\n    return 2 * x",
            "test_list": ["assert double(2) == 4", "assert double(0) == 0"],
            "test_setup_code": "",
            "challenge_test_list": [],
        },
    ],
}

# A chat template for the tiny tokenizer, so that conversational prompts are exercised too.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['content'] }}\n{% endfor %}{% if add_generation_prompt %}={% endif %}"
)


def save_tiny_model(directory: Path, chat_template: bool = True) -> Path:
    """A tiny Qwen2 + char tokenizer saved like a Hub checkpoint (``from_pretrained`` loads it)."""
    tokenizer = char_tokenizer()
    if chat_template:
        tokenizer.chat_template = CHAT_TEMPLATE
    model = tiny_qwen2(tokenizer, hidden_size=32, num_hidden_layers=2, max_position_embeddings=4096)
    directory.mkdir(parents=True, exist_ok=True)
    with _hf_progress_bars_off():
        model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def write_raw(directory: Path, task: str, copies: int = 4) -> Path:
    """A JSONL file of ``RAW_ROWS[task]`` repeated with distinct ids (prompts differ per copy)."""
    path = directory / f"{task}.jsonl"
    with open(path, "w") as f:
        for copy in range(copies):
            for row in RAW_ROWS[task]:
                row = dict(row)
                if task == "math":
                    row["question"] = f"{row['question']} (case {copy})"
                else:
                    row["text"] = f"{row['text']} Case {copy}."
                f.write(json.dumps(row) + "\n")
    return path


def cpu_overrides(model_dir: Path, output_dir: Path, steps: int = 1) -> list[str]:
    """Command-line overrides that make a GPU recipe run one tiny CPU step (LoRA settings untouched)."""
    return [
        "--model_name_or_path", str(model_dir),
        "--dtype", "float32",
        "--output_dir", str(output_dir),
        "--use_cpu", "true",
        "--bf16", "false",
        "--max_steps", str(steps),
        "--per_device_train_batch_size", "4",
        "--gradient_accumulation_steps", "1",
        "--steps_per_generation", "1",
        "--num_generations", "2",
        "--max_completion_length", "8",
        "--max_train_samples", "8",
        "--max_eval_samples", "2",
        "--eval_every_tokens", "1000000",
        "--eval_samples", "1",
        "--save_strategy", "no",
        "--report_to", "none",
        "--dataloader_num_workers", "0",
        "--overlong_buffer", "4",
    ]  # fmt: skip


def command(recipe: str, model_dir: Path, data: Path | None, output_dir: Path, steps: int = 2) -> list[str]:
    """The ``trl-loo-gspo train`` command line that trains ``recipe`` on the local model (and data file)."""
    argv = ["trl-loo-gspo", "train", "--config", recipe, *cpu_overrides(model_dir, output_dir, steps)]
    if data is not None:  # one local file has no test split: hold out validation rows (no prompt on both sides)
        argv += ["--dataset_name", str(data), "--validation_size", "2"]
    return argv


def local_setup(directory: Path, task: str = "math") -> tuple[Path, Path | None, list[str]]:
    """Write ``directory/model`` (and ``directory/<task>.jsonl`` for math and code; the proofs recipe ships its data)
    and return them with the train command for ``recipes/<task>-lora.yaml``."""
    directory = Path(directory)
    model = save_tiny_model(directory / "model")
    data = write_raw(directory, task) if task in RAW_ROWS else None
    return model, data, command(f"recipes/{task}-lora.yaml", model, data, directory / "out")


def main(directory: str, task: str) -> int:
    model, data, argv = local_setup(Path(directory), task)
    print(f"Wrote a tiny local model to {model}" + (f" and {len(RAW_ROWS[task]) * 4} rows to {data}" if data else ""))
    print("Train the recipe on them (from the repository root, on a CPU, offline):")
    print("  " + shlex.join(argv))
    return 0
