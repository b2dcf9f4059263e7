"""What a run records and publishes: the method §2 registration record (:mod:`.registration`) and the model card's
sections (:mod:`.card`). Standard library and third-party packages only; never the trainer, config, experiment or
cli."""
