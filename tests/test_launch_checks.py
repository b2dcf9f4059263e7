"""Launch checks (trl_loo_gspo/launch.py): a process group that would train as independent copies is refused, and
a requested engine that accelerate did not set up is named — as pure decisions and in real 2-process launches."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from accelerate.utils import DistributedType

from trl_loo_gspo.trainer.launch import engine_warning, launch_error, requested_engine

from .helpers import free_port

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------- pure decisions
@pytest.mark.parametrize(
    ("world", "processes", "kind", "refused"),
    [
        (1, 1, DistributedType.NO, False),  # a plain single process
        (2, 2, DistributedType.MULTI_CPU, False),  # gloo with use_cpu
        (2, 2, DistributedType.FSDP, False),
        (2, 1, DistributedType.NO, True),  # every process alone
        (2, 2, DistributedType.NO, True),  # --ddp_backend gloo without use_cpu: 2 ranks, nothing all-reduced
    ],
)
def test_launch_error(world, processes, kind, refused):
    error = launch_error(world, processes, kind)
    assert (error is not None) == refused
    if refused:
        assert "use_cpu=True" in error and f"WORLD_SIZE={world}" in error


class _Args:
    fsdp = None
    deepspeed = None


def test_requested_engine_from_environment_and_arguments():
    args = _Args()
    assert requested_engine({}, args) is None
    assert requested_engine({"ACCELERATE_USE_FSDP": "true"}, args) == DistributedType.FSDP
    assert requested_engine({"ACCELERATE_USE_FSDP": "false"}, args) is None
    assert requested_engine({"ACCELERATE_USE_DEEPSPEED": "True"}, args) == DistributedType.DEEPSPEED
    args.fsdp = ["full_shard"]
    assert requested_engine({}, args) == DistributedType.FSDP


def test_engine_warning():
    assert engine_warning(None, DistributedType.MULTI_CPU) is None
    assert engine_warning(DistributedType.FSDP, DistributedType.FSDP) is None
    message = engine_warning(DistributedType.FSDP, DistributedType.MULTI_CPU)
    assert "asked for FSDP" in message and "MULTI_CPU" in message and "plain DDP" in message
    assert "asked for DeepSpeed" in engine_warning(DistributedType.DEEPSPEED, DistributedType.MULTI_GPU)


# ---------------------------------------------------------------- real launches
def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", TRL_EXPERIMENTAL_SILENCE="1", PYTHONPATH=str(ROOT))
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _launched(output: str) -> list[dict]:
    return [json.loads(line[len("LAUNCH ") :]) for line in output.splitlines() if line.startswith("LAUNCH ")]


@pytest.mark.slow
def test_gloo_without_use_cpu_is_refused_on_every_rank(tmp_path):
    """``--ddp_backend gloo`` without ``use_cpu``: 2 ranks with DistributedType.NO used to train independently
    (rank 0 on its own rows, denominator 44 instead of 84) and rank 1 crashed later; now both refuse at once."""
    worker = [str(ROOT / "tests" / "launch_worker.py"), "--out", str(tmp_path)]
    worker += ["--overrides", json.dumps({"use_cpu": False, "ddp_backend": "gloo"})]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    result = _run([*cmd, "--master_port", str(free_port()), *worker])
    assert result.returncode != 0
    assert result.stderr.count("DistributedType.NO: no gradient is all-reduced") == 2, result.stderr[-4000:]
    assert _launched(result.stdout) == []  # no rank got as far as training


@pytest.mark.slow
def test_fsdp_config_on_cpu_warns_that_it_runs_as_ddp(tmp_path):
    """The shipped fsdp2.yaml launched on CPU silently ran plain DDP; now the main process says so."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file"]
    cmd += [str(ROOT / "recipes" / "accelerate" / "fsdp2.yaml"), "--num_processes", "2", "--mixed_precision", "no"]
    cmd += ["--main_process_port", str(free_port()), str(ROOT / "tests" / "launch_worker.py"), "--out", str(tmp_path)]
    result = _run(cmd)
    assert result.returncode == 0, result.stderr[-4000:]
    launched = _launched(result.stdout)
    assert [state["type"] for state in launched] == ["MULTI_CPU", "MULTI_CPU"]  # what accelerate set up
    assert result.stderr.count("The launch asked for FSDP") == 1, result.stderr[-4000:]  # once, main process
    assert "runs as plain DDP" in result.stderr
