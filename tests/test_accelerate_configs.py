"""recipes/accelerate/*.yaml: each file loads with accelerate's own config loader and says what docs/recipes.md says it
does; cpu-2proc.yaml really starts two CPU processes that form one process group."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file
from accelerate.utils import DistributedType

from .helpers import free_port

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "recipes" / "accelerate"

# file -> (distributed_type, num_processes, mixed_precision)
EXPECTED = {
    "ddp.yaml": (DistributedType.MULTI_GPU, 8, "bf16"),
    "zero2.yaml": (DistributedType.DEEPSPEED, 8, "bf16"),
    "zero3.yaml": (DistributedType.DEEPSPEED, 8, "bf16"),
    "fsdp2.yaml": (DistributedType.FSDP, 8, "bf16"),
    "cpu-2proc.yaml": (DistributedType.MULTI_GPU, 2, "no"),
}


def load(name: str) -> ClusterConfig:
    return load_config_from_file(str(CONFIGS / name))


def test_every_config_is_listed():
    assert sorted(p.name for p in CONFIGS.glob("*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_config_loads_with_expected_fields(name):
    config = load(name)
    distributed_type, num_processes, mixed_precision = EXPECTED[name]
    assert isinstance(config, ClusterConfig)
    assert config.distributed_type == distributed_type
    assert config.num_processes == num_processes
    assert config.mixed_precision == mixed_precision
    assert config.num_machines == 1 and config.machine_rank == 0
    assert config.dynamo_config == {}  # no torch.compile
    if distributed_type != DistributedType.DEEPSPEED:
        assert config.deepspeed_config == {}
    if distributed_type != DistributedType.FSDP:
        assert config.fsdp_config == {}


@pytest.mark.parametrize(("name", "stage"), [("zero2.yaml", 2), ("zero3.yaml", 3)])
def test_deepspeed_stage(name, stage):
    deepspeed = load(name).deepspeed_config
    assert deepspeed["zero_stage"] == stage
    assert deepspeed["zero3_init_flag"] is (stage == 3)
    assert deepspeed["offload_optimizer_device"] == deepspeed["offload_param_device"] == "none"


def test_fsdp2():
    fsdp = load("fsdp2.yaml").fsdp_config
    assert fsdp["fsdp_version"] == 2
    assert fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert fsdp["fsdp_offload_params"] is False


PROBE = textwrap.dedent(
    """
    import json
    import sys

    import torch
    import torch.distributed as dist
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)  # what TrainingArguments(use_cpu=True) passes on
    state = accelerator.state
    total = torch.tensor([state.process_index + 1.0])
    if dist.is_initialized():
        dist.all_reduce(total)  # a real collective: 1 + 2 with two ranks
    record = {
        "num_processes": state.num_processes,
        "process_index": state.process_index,
        "distributed_type": str(state.distributed_type),
        "backend": dist.get_backend() if dist.is_initialized() else None,
        "all_reduce": total.item(),
    }
    with open(f"{sys.argv[1]}/rank{state.process_index}.json", "w") as f:
        json.dump(record, f)
    accelerator.wait_for_everyone()
    if dist.is_initialized():
        dist.destroy_process_group()
    """
)


@pytest.mark.slow
def test_cpu_2proc_starts_two_ranks(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    out = tmp_path / "out"
    out.mkdir()
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CONFIGS / "cpu-2proc.yaml")]
    cmd += ["--main_process_port", str(free_port()), str(script), str(out)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    # `accelerate launch --cpu --num_processes 2` would leave one file with num_processes == 1
    assert sorted(r["process_index"] for r in records) == [0, 1], records
    for record in records:
        assert record["num_processes"] == 2, record
        assert record["distributed_type"] == str(DistributedType.MULTI_CPU), record
        assert record["backend"] == "gloo", record
        assert record["all_reduce"] == 3.0, record
