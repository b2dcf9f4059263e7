"""DeepSpeed ZeRO-2, ZeRO-3 and FSDP2, run for real on CPU: two gloo processes launched through the shipped
accelerate configs (``recipes/accelerate/{zero2,zero3,fsdp2}.yaml --num_processes 2 --mixed_precision no``,
``use_cpu=True``).

For a full model and for LoRA, one optimizer step under each engine equals one process on the same global batch;
validation (``ValidationCallback.evaluate``, including shares that differ between the processes) gives the
one-process figures; ``save_model`` writes a model that loads and equals the trained one (ZeRO-3: the gathered
state dict; FSDP2: FULL_STATE_DICT). FSDP2 is forced in the test worker (``tests/engine_worker.py``,
``force_fsdp_branch_on_cpu``): accelerate would otherwise silently run ``fsdp2.yaml`` on CPU as plain DDP.

DeepSpeed JIT-builds an op at its first launch (minutes on 2 cores): every launch shares one build cache,
``$TORCH_EXTENSIONS_DIR`` (see tests/conftest.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from .helpers import make_model_and_tokenizer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
TWO_PROCESSES = dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, steps_per_generation=2)
# S = 1 < GA = 2: the step spans two generation rounds, the trainer rescales the (sharded) gradients in place
SPANNING = dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, steps_per_generation=1)
ONE_PROCESS = dict(per_device_train_batch_size=16, gradient_accumulation_steps=1, steps_per_generation=1)
TYPES = {"zero2": "DistributedType.DEEPSPEED", "zero3": "DistributedType.DEEPSPEED", "fsdp2": "DistributedType.FSDP"}
needs_deepspeed = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed (pip install deepspeed)"
)
CASES = [
    pytest.param("zero2", "full", "S=GA", marks=needs_deepspeed, id="zero2-full"),
    pytest.param("zero2", "lora", "S=GA", marks=needs_deepspeed, id="zero2-lora"),
    pytest.param("zero3", "full", "S=GA", marks=needs_deepspeed, id="zero3-full"),
    pytest.param("zero3", "lora", "S=GA", marks=needs_deepspeed, id="zero3-lora"),
    pytest.param("fsdp2", "full", "S=GA", id="fsdp2-full"),
    pytest.param("fsdp2", "lora", "S=GA", id="fsdp2-lora"),
    pytest.param("fsdp2", "full", "S<GA", id="fsdp2-full-spanning"),
]
TIMES: dict[str, float] = {}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _environment() -> dict[str, str]:
    # TORCH_EXTENSIONS_DIR comes from tests/conftest.py (or CI); DS_ACCELERATOR makes DeepSpeed's CPU choice explicit;
    # the interpreter's bin folder first on PATH: DeepSpeed's JIT build runs `ninja` (pip's ninja lives there)
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    return dict(os.environ, OMP_NUM_THREADS="1", TRL_EXPERIMENTAL_SILENCE="1", DS_ACCELERATOR="cpu", PATH=path)


def _run(cmd: list[str], name: str) -> subprocess.CompletedProcess:
    start = time.perf_counter()
    result = subprocess.run(cmd, cwd=ROOT, env=_environment(), capture_output=True, text=True, timeout=900)
    TIMES[name] = time.perf_counter() - start
    print(f"[engines] {name}: {TIMES[name]:.1f} s")
    return result


def _load(path: Path) -> dict:
    assert path.exists(), f"{path.name} was not written"
    return torch.load(path)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tiny")
    model, _ = make_model_and_tokenizer(seed=3)
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def reference(model_dir, tmp_path_factory) -> Path:
    """One process, the same global batch of 16 rows in one micro-batch: full model and LoRA (one launch)."""
    out = tmp_path_factory.mktemp("one-process")
    cmd = [sys.executable, str(ROOT / "tests" / "engine_worker.py"), "--engine", "single", "--variants", "full,lora"]
    cmd += ["--model-dir", str(model_dir), "--out", str(out), "--expect-processes", "1"]
    result = _run(cmd + ["--overrides", json.dumps(ONE_PROCESS)], "one process (full + LoRA)")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    return out


@pytest.fixture(scope="module")
def engine_run(model_dir, tmp_path_factory) -> Callable[[str, str, str], tuple[Path, subprocess.CompletedProcess]]:
    """Launch the worker on two processes through the shipped config once per engine and schedule, training every
    variant the cases ask of that pair in the one launch (a launch's cost is starting the processes). ZeRO-3 gets a
    launch per variant: a second model loaded in a process whose first one ZeRO-3 partitioned arrives partitioned."""
    runs: dict[tuple[str, str, str], tuple[Path, subprocess.CompletedProcess]] = {}

    def get(engine: str, variant: str, schedule: str) -> tuple[Path, subprocess.CompletedProcess]:
        key = (engine, schedule, variant if engine == "zero3" else "")
        if key not in runs:
            same = [c.values[1] for c in CASES if (c.values[0], c.values[2]) == key[:2]]
            variants = variant if engine == "zero3" else ",".join(dict.fromkeys(same))
            out = tmp_path_factory.mktemp(f"{engine}-{schedule}-{key[2]}")
            cmd = [sys.executable, "-m", "accelerate.commands.launch"]
            cmd += ["--config_file", str(ROOT / "recipes" / "accelerate" / f"{engine}.yaml")]
            cmd += ["--num_processes", "2", "--mixed_precision", "no", "--main_process_port", str(_free_port())]
            cmd += [str(ROOT / "tests" / "engine_worker.py"), "--engine", engine, "--variants", variants]
            cmd += ["--model-dir", str(model_dir), "--out", str(out)]
            overrides = SPANNING if schedule == "S<GA" else TWO_PROCESSES
            runs[key] = out, _run(cmd + ["--overrides", json.dumps(overrides)], f"{engine} {variants} {schedule}")
        return runs[key]

    return get


def _log(result: subprocess.CompletedProcess) -> str:
    return result.stdout[-3000:] + result.stderr[-8000:]


@pytest.mark.parametrize(("engine", "variant", "schedule"), CASES)
def test_one_step_equals_one_process(engine_run, reference, engine, variant, schedule):
    out, result = engine_run(engine, variant, schedule)
    assert (out / f"update-{variant}.pt").exists(), _log(result)  # written before validation runs
    dist, single = _load(out / f"update-{variant}.pt"), _load(reference / f"update-{variant}.pt")
    assert dist["processes"] == 2 and dist["distributed_type"] == TYPES[engine]
    assert dist["fsdp_sharded"] == (engine == "fsdp2")  # fully_shard really ran (parameters are DTensors)
    assert sorted(dist["delta"]) == sorted(single["delta"])
    assert max(v.abs().max().item() for v in single["delta"].values()) > 1e-3  # a real update was compared
    worst = max((dist["delta"][k] - v).abs().max().item() for k, v in single["delta"].items())
    print(f"[engines] {engine} {variant} {schedule}: max |update difference| = {worst:.2e}")
    assert worst <= 1e-6
    assert abs(dist["loss"] - single["loss"]) <= 1e-6


@pytest.mark.parametrize(("engine", "variant", "schedule"), CASES)
def test_validation_gives_the_one_process_figures(engine_run, reference, engine, variant, schedule):
    """8 rows (4 per process), 1 row (one process has none) and 129 rows with batch size 64 (65 and 64 rows: 2 and
    1 generate calls unpadded). Before every process's share was padded to the same size, ZeRO-3 hung there (one
    process in generate, the other gathering scores; the worker's watchdog ends it after 180 s) and FSDP2 aborted
    (gloo::EnforceNotMet: collective mismatch)."""
    out, result = engine_run(engine, variant, schedule)
    assert result.returncode == 0, _log(result)
    dist, single = _load(out / f"validation-{variant}.pt"), _load(reference / f"validation-{variant}.pt")
    assert sorted(dist) == ["rows1", "rows129", "rows8"]
    for name, expected in single.items():
        got = dist[name]
        # greedy answers: the same weights (within 1e-8) give the same answers; a padded row counted would change
        # the denominator (129 -> 130); sampled answers use per-process generator streams, so only their range
        assert got["eval/pass_at_1"] == expected["eval/pass_at_1"], name
        assert got["eval/unscorable"] == expected["eval/unscorable"], name
        assert 0.0 <= got["eval/pass_rate"] <= 1.0, name
        assert got["step"] == expected["step"] == 1.0, name
    assert 0 < single["rows129"]["eval/pass_at_1"] < 1  # the figure depends on which rows are counted


@pytest.mark.parametrize(("engine", "variant", "schedule"), CASES)
def test_saved_model_loads_and_equals_the_trained_one(engine_run, model_dir, engine, variant, schedule):
    from transformers import AutoModelForCausalLM

    out, _ = engine_run(engine, variant, schedule)
    trained = _load(out / f"update-{variant}.pt")["trained"]
    saved = out / f"saved-{variant}"
    if variant == "lora":
        from peft import PeftModel

        base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        loaded = PeftModel.from_pretrained(base, saved).state_dict()
    else:
        loaded = AutoModelForCausalLM.from_pretrained(saved, dtype=torch.float32).state_dict()
    assert set(trained) <= set(loaded)
    for name, value in trained.items():
        torch.testing.assert_close(loaded[name], value, rtol=0, atol=0, msg=f"parameter {name}")
