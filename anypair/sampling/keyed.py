"""Position-keyed sampling: the target's sample at generated position n is

    x_n = argmax_v  p_n(v) / E_n(v),        E_n(v) ~ Exp(1), one vector per (request key, n)

This is the exponential race (the Gumbel-max trick written without logarithms; vLLM's sampler
draws its tokens the same way): the smallest of independent E(v) / p(v) belongs to token v with
probability exactly p(v) / sum(p), so x_n follows p_n. The noise of position n depends only on
the request's key and on n, never on how many draws came before it, and positions get independent
noise; so the sampled text is a function of the key and the target's logits alone, distributed as
the target sampling by itself. A draft cannot change that text, only reach it sooner: a proposed
token is kept exactly when it is the target's keyed sample at its position (the greedy rule, applied
to these noisy argmaxes), and the same seed gives the same text with or without a draft, whatever
the policy decided and however busy the machine was.

The noise comes from a counter-based generator (numpy's Philox, keyed by request key and
position), so a position's vector costs the same whichever position came before, and a drafter may
read the noise of positions it is proposing for (coupled drafts: `sample_draft_token`). The draws are
always made on the CPU and copied to the device of the logits they race against: a GPU's own generator
would draw other values, so the same seed gives the same text on every device whose logits agree.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Optional

import numpy as np
import torch

#: positions whose noise is kept: a coupled drafter reads a position's row a round before the verifier does
CACHED_POSITIONS = 16
#: rows kept: each position's CPU draws and their copy on the logits' device
CACHED_ROWS = 2 * CACHED_POSITIONS


def draw_request_key(generator: torch.Generator) -> int:
    """A request's 63-bit noise key, drawn from the request's seeded generator."""
    return int(torch.randint(0, 2**63 - 1, (1,), generator=generator, dtype=torch.int64))


class PositionNoise:
    """The Exp(1) noise of one request, by generated position (0 = the first generated token).

    `rekey` starts a request; the verifier and a coupled drafter then read the same rows."""

    def __init__(self) -> None:
        self._key: Optional[int] = None
        self._rows: "OrderedDict[tuple[int, int, torch.device], torch.Tensor]" = OrderedDict()

    @property
    def key(self) -> Optional[int]:
        return self._key

    def rekey(self, key: int) -> None:
        if not 0 <= key < 2**64:
            raise ValueError(f"a noise key must be a 64-bit unsigned integer, got {key}")
        self._key = key
        self._rows.clear()

    def exponential(self, position: int, rows: int, device: "torch.device | str" = "cpu") -> torch.Tensor:
        """float64 [rows] of Exp(1) draws for `position`, on `device` (the device of the logits they
        race against); the same values on every call and on every device."""
        if self._key is None:
            raise RuntimeError("PositionNoise.exponential before rekey: the request has no key yet")
        if position < 0:
            raise ValueError(f"positions count generated tokens from 0, got {position}")
        device = torch.device(device)
        cached = self._cached(position, rows, device)
        if cached is not None:
            return cached
        on_cpu = self._cached(position, rows, torch.device("cpu"))
        if on_cpu is None:
            bit_generator = np.random.Philox(key=(self._key << 64) | position)
            draws = np.random.Generator(bit_generator).standard_exponential(rows)
            # an Exp(1) draw of exactly 0 (probability ~2^-53) would divide by zero: the next float up
            # changes nothing a sample could notice
            np.maximum(draws, np.finfo(np.float64).tiny, out=draws)
            on_cpu = self._keep(position, rows, torch.device("cpu"), torch.from_numpy(draws))
        # a copy of the CPU draws, never a device generator's own: the values decide the text
        return on_cpu if device.type == "cpu" else self._keep(position, rows, device, on_cpu.to(device))

    def _cached(self, position: int, rows: int, device: torch.device) -> Optional[torch.Tensor]:
        row = self._rows.get((position, rows, device))
        if row is not None:
            self._rows.move_to_end((position, rows, device))
        return row

    def _keep(self, position: int, rows: int, device: torch.device, row: torch.Tensor) -> torch.Tensor:
        self._rows[(position, rows, device)] = row
        if len(self._rows) > CACHED_ROWS:
            self._rows.popitem(last=False)
        return row


def keyed_race(probs: torch.Tensor, noise_row: torch.Tensor) -> torch.Tensor:
    """float64 probs(v) / noise_row(v), computed where `probs` lives (the noise must be there too:
    `PositionNoise.exponential(..., device=probs.device)`); its argmax is the keyed sample."""
    if probs.dim() != 1 or noise_row.shape != probs.shape:
        raise ValueError(f"keyed_sample wants a 1-D weight vector and a noise row of the same shape, got "
                         f"{tuple(probs.shape)} and {tuple(noise_row.shape)}")
    if noise_row.device != probs.device:
        raise ValueError(f"the noise row is on {noise_row.device} but the probabilities are on {probs.device}: "
                         "ask PositionNoise.exponential for the probabilities' device")
    return probs.to(torch.float64) / noise_row


def keyed_sample(probs: torch.Tensor, noise_row: torch.Tensor) -> int:
    """argmax_v probs(v) / noise_row(v): one draw from `probs` (non-negative weights, need not sum
    to 1) decided by `noise_row`. A zero-probability id never wins against a positive one."""
    race = keyed_race(probs, noise_row)
    token_id = int(torch.argmax(race))
    if not float(race[token_id]) > 0.0:
        raise ValueError("cannot sample from a distribution with no positive probability")
    return token_id
