"""The offline CPU demo (``trl-loo-gspo demo``): a small local policy warm-started on integer addition and trained
with verifiable rewards; also the tiny model and tokenizer (:mod:`.tiny`) the tests and benchmarks build locally."""
