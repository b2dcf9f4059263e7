"""Cost of mapping span characters to tokens for process feedback (method §6): exact prefix decoding (O(T²)) vs
``tokenizers``' ``DecodeStream`` (linear; used whenever its text equals the full decode).

Run: ``OMP_NUM_THREADS=1 python benchmarks/process_token_mapping.py``. Uses a local character tokenizer (nothing is
downloaded); prints the median milliseconds per completion for several completion lengths.
"""

from __future__ import annotations

import random
import statistics
import string
import time

from trl_loo_gspo.algorithms import spans as process
from trl_loo_gspo.demo.tiny import char_tokenizer


def median_ms(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main() -> None:
    tokenizer = char_tokenizer(string.printable)
    rng = random.Random(0)
    text = "".join(rng.choice(string.ascii_letters + " ;.") for _ in range(2048))
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]

    def decode(batch):
        return tokenizer.batch_decode(batch, skip_special_tokens=True)

    print("tokens  prefix-decoding ms  streamed ms  ratio")
    for length in (128, 512, 1024, 2048):
        part = ids[:length]
        full = decode([part])[0]
        prefix = median_ms(lambda part=part: process.token_char_ends(decode, part), repeats=3)
        streamed = median_ms(
            lambda part=part, full=full: process.token_char_ends_streaming(tokenizer._tokenizer, part, full)
        )
        print(f"{length:6d}  {prefix:18.2f}  {streamed:11.2f}  {prefix / streamed:5.0f}x")


if __name__ == "__main__":
    main()
