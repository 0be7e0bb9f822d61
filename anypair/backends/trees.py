"""Trees of candidate rows on the gguf engine: their checks, their positions, and the move of the
accepted path into the cache.

A tree forward (`SequenceRows.parents`) writes each root-to-leaf path's keys and values at the
positions of its depths, one path after another (csrc/forward.c: from the leaf latest in row order
to the earliest), so afterwards the cache holds the path of the earliest leaf: a proposal's main
chain, its first rows. When the verifier keeps another path, its rows' keys and values (kept by the
forward in `tree_kv`) are copied into their positions; when it keeps (a prefix of) the main chain,
nothing moves."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from anypair.errors import InputError


def check_parents(parents: Sequence[int], rows: int) -> list[int]:
    """`parents` as ints, or a one-line error: one per row, -1 for the first only, else an earlier row."""
    parents = [int(p) for p in parents]
    if len(parents) != rows or not parents or parents[0] != -1 \
            or any(not 0 <= p < i for i, p in enumerate(parents) if i):
        raise InputError(f"a tree of {rows} rows needs one parent a row: -1 for the first, an earlier row for "
                         f"the others (got {parents[:16]})")
    return parents


def depths(parents: Sequence[int]) -> list[int]:
    """Each row's depth (the root's 0): its position past the cached ones."""
    out: list[int] = []
    for p in parents:
        out.append(0 if p < 0 else out[p] + 1)
    return out


def written_path(parents: Sequence[int]) -> list[int]:
    """The path the cache holds after the forward: the earliest leaf's, root first."""
    has_child = {p for p in parents if p >= 0}
    leaf = min(i for i in range(len(parents)) if i not in has_child)
    path = [leaf]
    while parents[path[-1]] >= 0:
        path.append(parents[path[-1]])
    return path[::-1]


@dataclass
class ScoredTree:
    """A slot's last tree forward: where it started, its rows' parents, their keys and values
    ([layers, rows, 2, kv_heads, head_dim] float16)."""

    start: int
    parents: list[int]
    kv: torch.Tensor

    def keep(self, rows: Sequence[int], layers, slot: int) -> int:
        """Moves `rows` (root first, each the previous one's child) into positions start..; returns
        the sequence's new length. `layers` are the engine's (caches [slots, kv_heads, positions, head_dim])."""
        rows = [int(r) for r in rows]
        if not rows or rows[0] != 0 or any(not 0 <= r < len(self.parents) or self.parents[r] != prev
                                           for prev, r in zip(rows, rows[1:])):
            raise ValueError(f"keep_path: rows {rows} are not a root-to-leaf path of the tree {self.parents}")
        written = written_path(self.parents)
        first = next((i for i, r in enumerate(rows) if i >= len(written) or written[i] != r), len(rows))
        if first < len(rows):
            moved = torch.tensor(rows[first:])
            at = slice(self.start + first, self.start + len(rows))
            for index, layer in enumerate(layers):
                k, v = (self.kv[index, moved, part].transpose(0, 1) for part in (0, 1))  # [kv_heads, n, head_dim]
                layer.k_cache[slot, :, at] = k
                layer.v_cache[slot, :, at] = v
        return self.start + len(rows)
