"""The update in micro-batches: any probe's loss over a whole step's batch, with one micro-batch's activations.

Every probe reaches the model only through the learner's log-probs (`RolloutBatch.logprobs`), so the loss L is a
function of the log-prob tensors it asked for. With `MicroBatchedLogprobs` a request is answered by forwards of
`micro_batch` sequences without a graph, concatenated into a leaf tensor that requires grad. `backward(L)` first
takes dL/dlogp for every leaf, then forwards each micro-batch again with a graph and backpropagates its slice:

    dL/dtheta = sum_requests sum_chunks (dL/dlogp_chunk)^T dlogp_chunk/dtheta

the whole batch's gradient (GradCache, Gao et al. 2021, applied to log-probs) at the cost of one extra forward
without a graph. Written here because TRL's micro-batching (gradient accumulation) sums per-micro-batch losses,
which is exact only for losses that decompose over sequences; pooled baselines, HACPO's ratio statistics and
the per-token weights of the sharing probes span the batch.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

LogProbs = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]


def chunks(rows: int, size: int) -> list[slice]:
    """Consecutive row slices of at most `size` rows covering range(rows)."""
    return [slice(start, min(start + size, rows)) for start in range(0, rows, size)]


class MicroBatchedLogprobs:
    """A LogProbs callable over `forward` (with a graph, (N, P), (N, P), (N, T), (N, T) -> (N, T)) that keeps at most
    `micro_batch` sequences' activations alive; pair every loss built from it with `backward`."""

    def __init__(self, forward: LogProbs, micro_batch: int):
        if micro_batch < 1:
            raise ValueError(f"micro_batch must be >= 1, got {micro_batch}")
        self.forward, self.micro_batch = forward, micro_batch
        self.requests: list[tuple[tuple[Tensor, ...], Tensor]] = []

    def __call__(self, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor,
                 completion_mask: Tensor) -> Tensor:
        inputs = (prompt_ids, prompt_mask, completion_ids, completion_mask)
        with torch.no_grad():
            logp = torch.cat([self.forward(*(x[part] for x in inputs))
                              for part in chunks(len(prompt_ids), self.micro_batch)])
        if torch.is_grad_enabled():
            logp.requires_grad_(True)
            self.requests.append((inputs, logp))
        return logp

    def backward(self, loss: Tensor) -> None:
        """loss.backward() down to the log-probs, then each micro-batch's forward again, backpropagated with its
        slice of dL/dlogp (the gradients accumulate in the parameters' .grad)."""
        requests, self.requests = self.requests, []
        loss.backward()
        for inputs, logp in requests:
            if logp.grad is None:
                continue  # a request the loss did not use
            for part in chunks(len(logp), self.micro_batch):
                if logp.grad[part].any():  # rows the loss gives no weight add nothing
                    self.forward(*(x[part] for x in inputs)).backward(logp.grad[part])
