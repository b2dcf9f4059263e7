"""The policy's forward pass as the trainer uses it: a mixin over TRL's ``_get_per_token_logps_and_entropies``.

* Rows of a batch that are dynamic-sampling padding (``padding_rows``) get no forward pass: TRL's helper runs on the
  other rows and the padding rows' log-probs and entropies are 0 (they carry no valid token, so nothing reads
  them). One row is always kept, so that a step still has a graph. Multimodal batches run whole.
* While TRL computes its own loss with entropy feedback on, the entropies TRL computes are kept (detached) for the
  controller, so no second forward pass is needed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

# Model-input keys TRL forwards to `_get_per_token_logps_and_entropies` (multimodal models).
_FORWARD_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


class ForwardMixin:
    """Mixed into ``LooGspoTrainer`` (before ``GRPOTrainer`` in the MRO). TRL calls the forward helper from inside
    its own methods, so what a forward pass must know comes through :meth:`_forward_rows`, the one writer of the
    two attributes below."""

    _entropy_capture: list | None = None  # set while TRL's loss runs with entropy feedback on
    _skip_rows: torch.Tensor | None = None  # rows of the current forward that are dynamic-sampling padding

    @contextmanager
    def _forward_rows(self, skip: torch.Tensor | None = None, entropies: list | None = None) -> Iterator[None]:
        """Within the block, forward passes skip the ``skip`` rows (padding) and append the entropies TRL computes
        to ``entropies`` (when a list is given)."""
        saved = self._skip_rows, self._entropy_capture
        self._skip_rows, self._entropy_capture = skip, entropies
        try:
            yield
        finally:
            self._skip_rows, self._entropy_capture = saved

    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, **kwargs
    ):
        skip = self._skip_rows
        per_row = skip is not None and skip.numel() == input_ids.size(0) and bool(skip.any())
        if per_row and not any(kwargs.get(key) is not None for key in _FORWARD_KEYS):
            # Dynamic-sampling padding rows get no forward pass (their log-probs are 0 and masked out); one row is
            # always kept so that the step still has a graph.
            keep = ~skip.to(input_ids.device)
            keep[int(keep.nonzero()[0]) if keep.any() else 0] = True
            logps, entropies, aux = super()._get_per_token_logps_and_entropies(
                model, input_ids[keep], attention_mask[keep], logits_to_keep, batch_size, **kwargs
            )
            full = logps.new_zeros(input_ids.size(0), logps.size(1))
            full[keep] = logps
            if entropies is not None:
                full_entropies = entropies.new_zeros(input_ids.size(0), entropies.size(1))
                full_entropies[keep] = entropies
                entropies = full_entropies
            output = (full, entropies, aux)
        else:
            output = super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, **kwargs
            )
        if self._entropy_capture is not None and output[1] is not None:  # TRL's loss: keep its entropies
            self._entropy_capture.append(output[1].detach())
        return output

    def _policy_logps(self, model, inputs):
        """Per-token log-probs, entropies and the MoE aux loss of the completions (TRL's forward helper)."""
        completion_ids = inputs["completion_ids"]
        return self._get_per_token_logps_and_entropies(
            model,
            torch.cat([inputs["prompt_ids"], completion_ids], dim=1),
            torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1),
            completion_ids.size(1),
            compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled,
            **{key: inputs.get(key) for key in _FORWARD_KEYS},
        )
