"""Last-token entropy ``H_last`` (OGER Eq. 6), the confidence proxy of the entropy refinement.

Definition used throughout trl_explore: ``H_last_i`` is the Shannon entropy, in nats, of the policy's
next-token distribution ``pi_theta(. | q, tau_<T)`` that PRODUCED the final completion token of
``tau_i`` (EOS included when the completion stopped; the last kept token when it was truncated), at the
sampling temperature ``T`` (``softmax(logits / T)``, before top-p/top-k filtering; the raw policy at the
default ``T = 1``). The same convention holds on every generation path: the HF recorder below divides by ``T``,
and with vLLM the value comes from TRL's no-grad forward, whose entropies are taken at ``T``.

How it is obtained, without an extra policy forward pass when generating with transformers: a
forward hook on the LM head records the entropy of every decoding step's last-position logits
(``[B, V]`` per step, reduced at once to ``[B]``), and the value at step ``len_i - 1`` is kept. The cost
is one log-softmax over the vocabulary per decoding step, next to the step's full forward pass.
"""

from __future__ import annotations

import torch


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats of ``softmax(logits)`` over the last dimension.

    Args:
        logits: ``[..., V]`` unnormalised scores; ``-inf`` entries (masked tokens) are allowed.

    Returns:
        ``[...]`` float32 entropies, in ``[0, log V]``.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    p = logp.exp()
    # 0 * log 0 := 0 for masked tokens (p == 0, logp == -inf)
    return -(p * torch.where(p > 0, logp, torch.zeros_like(logp))).sum(-1)


def last_token_values(per_step: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Pick, for each row, the value at its last completion position ``lengths - 1``.

    Args:
        per_step: ``[B, T]`` per-position values (e.g. entropies of each decoding step).
        lengths: ``[B]`` completion lengths in tokens, each in ``[1, T]``.

    Returns:
        ``[B]`` values.

    Raises:
        ValueError: if a length is outside ``[1, T]`` (an empty completion has no last token).
    """
    lengths = lengths.to(per_step.device).long()
    bad = (lengths < 1) | (lengths > per_step.size(1))
    if bad.any():
        rows = torch.nonzero(bad).flatten().tolist()
        raise ValueError(f"completion lengths of rows {rows} are outside [1, {per_step.size(1)}]")
    return per_step.gather(1, (lengths - 1).unsqueeze(1)).squeeze(1)


class LastTokenEntropyRecorder:
    """Records, during ``model.generate``, the entropy of each decoding step's next-token distribution.

    Use as a context manager around one ``generate`` call on a causal LM; afterwards
    ``per_step_entropy`` is ``[B, T_gen]`` (step ``t`` produced completion token ``t``) and
    :meth:`last_token_entropy` gives ``H_last`` per row. The hook is removed on exit, also on errors.

    Args:
        model: the (unwrapped) causal LM; its ``get_output_embeddings()`` module is hooked.
        temperature: the sampling temperature ``T > 0``; entropies are of ``softmax(logits / T)`` (default 1).
    """

    def __init__(self, model: torch.nn.Module, temperature: float = 1.0):
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = float(temperature)
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if head is None:
            raise ValueError(f"{type(model).__name__} has no output embeddings (LM head) to record entropies from")
        self._head = head
        self._steps: list[torch.Tensor] = []
        self._handle = None

    def _hook(self, module, args, output):
        logits = output[0] if isinstance(output, tuple) else output
        last = logits[:, -1, :].detach()
        if self.temperature != 1.0:
            last = last.float() / self.temperature
        self._steps.append(entropy_from_logits(last))

    def __enter__(self) -> LastTokenEntropyRecorder:
        self._steps = []
        self._handle = self._head.register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    @property
    def per_step_entropy(self) -> torch.Tensor:
        """``[B, T_gen]`` entropies (nats); empty ``[0, 0]`` if nothing was recorded."""
        if not self._steps:
            return torch.zeros(0, 0)
        return torch.stack(self._steps, dim=1)

    def last_token_entropy(self, lengths: torch.Tensor) -> torch.Tensor:
        """``[B]`` entropy of the step that produced each row's last token, given ``[B]`` lengths.

        Raises:
            RuntimeError: if the recorded batch size does not match, or fewer steps were recorded
                than the longest completion (e.g. a generation backend that bypasses the LM head).
        """
        steps = self.per_step_entropy
        if steps.size(0) != lengths.numel() or steps.size(1) < int(lengths.max()):
            raise RuntimeError(
                f"recorded entropies of shape {tuple(steps.shape)} do not cover {lengths.numel()} completions "
                f"of up to {int(lengths.max())} tokens"
            )
        return last_token_values(steps, lengths)
