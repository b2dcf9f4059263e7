"""Experiments: a recipe or config turned into a trainer (:mod:`.build`, :mod:`.parser`), the data contract
(:mod:`.data`) and equal-budget ablations (:mod:`.ablation`). May import the trainer, verifiers, records and demo."""
