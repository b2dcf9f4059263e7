"""Throughput of the weights hash that registration computes (``registration.weights_fingerprint``).

Run: ``OMP_NUM_THREADS=1 python benchmarks/registration_hash.py``. Hashes a bf16 stack of linear layers (about 268 MB)
a few times and prints the median throughput; the time for a model is its bytes divided by this (plus, on a GPU,
the copy of each tensor to the CPU, not measured here).
"""

from __future__ import annotations

import statistics
import time

import torch

from trl_loo_gspo.records.registration import weights_fingerprint


def main(repeats: int = 5) -> None:
    model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096, bias=False) for _ in range(8)]).to(torch.bfloat16)
    megabytes = sum(p.numel() * p.element_size() for p in model.parameters()) / 1e6
    weights_fingerprint(model)  # warm-up
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        weights_fingerprint(model)
        seconds.append(time.perf_counter() - start)
    median = statistics.median(seconds)
    rate = megabytes / median
    print(f"{megabytes:.0f} MB hashed: median {median:.3f} s over {repeats} runs -> {rate:.0f} MB/s")
    for name, params in (("0.5B", 0.5e9), ("1.5B", 1.5e9), ("7B", 7e9)):
        print(f"  {name} bf16 ({params * 2 / 1e9:.0f} GB): about {params * 2 / 1e6 / rate:.1f} s at this rate")


if __name__ == "__main__":
    main()
