"""The comparison baseline of the demo and of ablations: stock ``trl.GRPOTrainer``, counting generated tokens."""

from __future__ import annotations

from trl import GRPOTrainer


class CountingGRPOTrainer(GRPOTrainer):
    """Stock GRPOTrainer that also counts generated tokens, so both trainers share one budget measure
    (``generated_tokens_total``, as ``LooGspoTrainer`` counts it). Nothing else is changed."""

    generated_tokens_total = 0

    def _generate(self, prompts):
        output = super()._generate(prompts)
        self.generated_tokens_total += sum(len(ids) for ids in output[1])
        return output
