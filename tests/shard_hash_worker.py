"""Worker for tests/test_registration_sharded.py: under ``torchrun --nproc_per_node 2`` (gloo, CPU), hash a tiny
model's weights whole, then sharded by FSDP2's ``fully_shard`` (DTensors) or DeepSpeed ZeRO-3 (empty placeholders in
``state_dict``), with ``registration.weights_fingerprint`` on every rank; rank 0 writes the digests as JSON."""

import argparse
import json
import os
import sys

# the repository root replaces this script's folder (tests/) on the path
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from trl_loo_gspo.demo.tiny import char_tokenizer, tiny_qwen2  # noqa: E402
from trl_loo_gspo.records.registration import weights_fingerprint  # noqa: E402


def _model() -> torch.nn.Module:
    return tiny_qwen2(char_tokenizer(), hidden_size=32, num_hidden_layers=2, seed=5)


def _fsdp2() -> torch.nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo")
    model = _model()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _zero3() -> torch.nn.Module:
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}
    engine, *_ = deepspeed.initialize(model=_model(), config=config)  # partitions every parameter
    return engine.module


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", choices=["fsdp2", "zero3"], required=True)
    parser.add_argument("--out", required=True)
    cli = parser.parse_args()
    model = _fsdp2() if cli.engine == "fsdp2" else _zero3()
    rank = dist.get_rank()
    local = next(iter(model.state_dict().values()))
    sharded = local.numel() != next(iter(_model().state_dict().values())).numel() or type(local) is not torch.Tensor
    digest = weights_fingerprint(model, hash_here=rank == 0)
    if rank == 0:
        result = {
            "sharded": sharded,
            "digest": digest,
            "world": dist.get_world_size(),
            "whole": weights_fingerprint(_model()),
        }
        with open(cli.out, "w") as f:
            json.dump(result, f)
    else:
        assert digest is None
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
