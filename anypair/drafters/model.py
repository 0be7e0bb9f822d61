"""ModelDrafter: a small causal LM drafts; its text is translated into target tokens.

Two paths:
- same vocabulary (decided by content, padded vocabularies included): draft ids ARE target ids,
  no translation at all;
- different vocabularies: the draft runs on its own tokenization of the conversation; its new
  bytes go through `Translator.draft_to_target`, and after verification `DraftSync.commit`
  re-aligns the draft's context with the smallest rollback of its KV cache.

Prompt window: the draft reads only the last `prompt_window` tokens of its prompt. Reading costs
the draft a forward over every prompt token before the first round, paid again on every request,
while what a small draft predicts rests mostly on the last few hundred tokens: on a 700-token
article the full read was a fifth of the request's time (CNN/DailyMail, 2 CPU cores), and the
window of 256 took the median speedup there from 0.77x to 0.89x with the same output.

The draft's KV cache persists across rounds: `_context_ids` is the draft's whole token context and
its slot caches a prefix of it; whatever is past that prefix is fed at the next step. Every forward
is yielded (`propose_steps`) for the batch scheduler to run, the prompt read included: it is the
first step's feed, after the first target token (so a request the policy or the batch keeps from
drafting never reads it), and the policy counts it as catch-up, not as drafting's cost.

Token healing (translated greedy path): the draft's tokenization of the committed text is cut
wherever the target's tokens end, so its last token is often one the draft would never have
written there (a lone "\n" where it writes "\n" + indentation as one token, half a word). A
draft fed such a tail predicts badly. So the last draft token of the committed text is held back
(it becomes the sync's `pending` bytes) and the draft's first token of the next round must start
with those bytes: the draft re-writes the tail its own way.
"""
from __future__ import annotations

import bisect
import time
from dataclasses import replace
from typing import Callable, Generator, Optional, Sequence, Union

import torch

from anypair.backends.base import ModelBackend, Slot, slot_of
from anypair.drafters.base import DraftCall, DraftRequest, Drafter, run_draft_calls
from anypair.sampling.keyed import PositionNoise
from anypair.tokenization.base import TokenizerAdapter
from anypair.types import DraftBudget, Proposal, SamplingConfig

PromptRenderer = Callable[[DraftRequest], list[int]]

# On the translated path the confidence stop applies only once the draft has written this many new
# tokens past its healed tail. The translation holds back its last target token (more text may
# still re-tokenize it), so a proposal of one new draft token is mostly empty; a round that drafted
# yet proposes nothing pays its steps, teaches the policy's calibration nothing, and reads as
# drafting that lost time. Sampling at T=0.7 (stop advice ~0.35, 10 HumanEval prompts):
# 4 prompts' first rounds and probes all came back empty and the policy gave up drafting for the
# request; with 2, 2.1 target tokens a round instead of 1.5.
MIN_TRANSLATED_DRAFT_TOKENS = 2
#: draft positions kept free at the end of the draft's context: past them its context slides
DRAFT_CONTEXT_MARGIN = 16
#: the draft's other choices a tree of candidates may add beside its proposal (its second choice at
#: a step, its first where it stopped unsure): the likeliest ones, each a branch of its own
MAX_ALTERNATIVES = 2


def merge_chains(chains: Sequence[Sequence[int]]) -> tuple[list[int], list[int]]:
    """Chains of target ids merged as a tree (a trie): (ids, parents), the first chain's tokens
    first (the main chain, each following the one before), then each other chain's tokens past its
    longest prefix already in the tree. Parents index ids; -1 follows the last committed token."""
    ids: list[int] = []
    parents: list[int] = []
    children: dict[tuple[int, int], int] = {}  # (parent, token) -> node
    for chain in chains:
        node = -1
        for token in chain:
            child = children.get((node, token))
            if child is None:
                child = children[(node, token)] = len(ids)
                ids.append(token)
                parents.append(node)
            node = child
    return ids, parents


class ModelDrafter(Drafter):
    name = "model"

    def __init__(
        self,
        slot: Union[Slot, ModelBackend],
        draft_tok: TokenizerAdapter,
        target_tok: TokenizerAdapter,
        render_prompt: PromptRenderer,
        *,
        same_vocabulary: Optional[bool] = None,
        confidence_threshold: Optional[float] = None,
        sampling: Optional[SamplingConfig] = None,
        noise: Optional[PositionNoise] = None,
        token_healing: bool = True,
        intersection_sampling: bool = False,
        prompt_window: int = 0,
    ) -> None:
        from anypair.tokenization import same_vocabulary as vocab_equal

        self.slot = slot_of(slot)  # the draft's sequence (a one-slot engine given by hand: its one slot)
        self.draft_tok = draft_tok
        self.target_tok = target_tok
        self.render_prompt = render_prompt
        self.same_vocabulary = vocab_equal(target_tok, draft_tok) if same_vocabulary is None else same_vocabulary
        # None: follow the policy's advice (DraftBudget.stop_confidence); a number: always that; 0: never stop early
        self.confidence_threshold = confidence_threshold
        self.sampling = sampling if sampling is not None and sampling.do_sample else None
        # how to draft when the target samples: by default the draft's greedy text, translated like in
        # greedy decoding (a token is kept with the target's probability of it); `intersection_sampling`:
        # the draft's keyed samples among the tokens the target also has, read with the target's own
        # noise (`noise`, the verifier's), so where draft and target agree they pick the same token
        self.draws_samples = self.sampling is not None and intersection_sampling
        if self.draws_samples and noise is None:
            raise ValueError("intersection sampling needs the verifier's PositionNoise (noise=...)")
        self.noise = noise
        self._next_position = 0  # the generated position of the next target token (keyed noise)
        if prompt_window < 0:
            raise ValueError(f"prompt_window must be >= 0 draft tokens (0: the whole prompt), got {prompt_window}")
        self.prompt_window = prompt_window  # 0: the whole prompt
        self._context_ids: list[int] = []  # draft ids (target ids on the same-vocabulary path)
        self._own_tokens: set[int] = set()  # the request's draft ids so far (its prompt's and committed text's)
        self._proposed_draft_ids: list[int] = []
        self._step_seconds: Optional[float] = None
        self._catch_up_seconds = 0.0  # this round's reading of tokens committed while it did not draft
        # logits rows the draft may pick: its real tokens, minus padded rows
        self._n_real = min(draft_tok.vocab_size, self.slot.vocab_size)
        self._draft_eos = frozenset(draft_tok.eos_ids)
        self._banned = torch.tensor(sorted(set(draft_tok.special_ids) - self._draft_eos), dtype=torch.long)
        # healing needs the translated greedy path: sampled draft tokens must map 1:1 to target tokens
        self.token_healing = token_healing and not self.same_vocabulary and not self.draws_samples
        self._healing_masks: dict[bytes, torch.Tensor] = {}
        self._pieces_sorted: Optional[tuple[list[bytes], torch.Tensor]] = None  # (bytes, ids) in bytes order
        if not self.same_vocabulary:
            from anypair.translator import DraftSync, Translator

            self.translator = Translator(target_tok, draft_tok)
            self.sync = DraftSync(draft_tok)
        else:
            self.translator = None
            self.sync = None
        # sampling drafts token by token inside the vocabulary intersection (the identity map on
        # the same-vocabulary path, sized to both models' logit rows)
        if self.draws_samples:
            from anypair.sampling import pair_vocab_map

            self.vocab_map = pair_vocab_map(target_tok, draft_tok)
        else:
            self.vocab_map = None

    # -- request lifecycle -------------------------------------------------------------------
    def start(self, request: DraftRequest) -> None:
        self.slot.reset()
        if self.same_vocabulary:
            self._context_ids = list(request.target_prompt_ids)
        else:
            self._context_ids = list(self.render_prompt(request))
            self.sync.reset()
        # the request's own tokens, the whole prompt's, scored even by a reduced head (backends/reduced_head.py)
        self._own_tokens = set(self._context_ids)
        self.slot.keep_head_tokens(self._own_tokens)
        if self.prompt_window and len(self._context_ids) > self.prompt_window:
            # positions restart at 0 in the window: the draft sees a shorter document, not a gap
            del self._context_ids[: len(self._context_ids) - self.prompt_window]
        self._proposed_draft_ids = []
        self._next_position = 0

    @property
    def step_seconds(self) -> Optional[float]:
        """The measured cost of one single-token draft step (smoothed), once measured."""
        return self._step_seconds

    @property
    def stops_by_confidence(self) -> bool:
        # also when sampling: the keyed verifier emits the target's own samples whatever the
        # proposal's length and however it was decided
        return self.confidence_threshold != 0

    def _stop_threshold(self, budget: DraftBudget, length: int) -> float:
        """The stop confidence for a proposal growing to `length` tokens."""
        return budget.stop_at(length) if self.confidence_threshold is None else self.confidence_threshold

    def _proposal(self, target_ids: list[int], confidence: Optional[float] = None,
                  translate_seconds: float = 0.0) -> Proposal:
        return Proposal(target_ids, self.name, confidence, translate_seconds, self._step_seconds,
                        self._catch_up_seconds)

    # -- drafting ----------------------------------------------------------------------------
    def _next_logits(self) -> Generator[DraftCall, torch.Tensor, torch.Tensor]:
        """The draft's logits after its whole context: one forward, yielded as a DraftCall (the
        caller of `propose_steps` runs it, alone or in a shared forward)."""
        self._slide_window()
        cached = self.slot.cached_length
        feed = self._context_ids[cached:]
        if not feed:  # everything is cached: re-feed the last token to get its logits
            self.slot.crop(cached - 1)
            feed = self._context_ids[cached - 1 :]
        call = DraftCall(self.slot, list(feed))
        logits = yield call
        if len(feed) > 2:  # the prompt's read, or what was committed while the draft did not draft
            self._catch_up_seconds += call.charged_seconds
        if len(feed) == 1:
            # only one-token steps measure the step cost: a catch-up feed after a paused stretch
            # (or a long prompt) would make every later step look many times dearer, and the
            # policy would then stop drafting for good
            per_step = call.charged_seconds
            self._step_seconds = per_step if self._step_seconds is None else 0.7 * self._step_seconds + 0.3 * per_step
        return logits

    def _slide_window(self) -> None:
        """A draft reads past its own context: when its context (the prompt's window, the committed text,
        this round's proposal) reaches the draft's limit, its last part (the prompt window, at most half
        the draft's context) is read again from position 0, as the prompt window is in `start`: the
        draft sees a shorter document, and a prompt longer than its context still drafts."""
        limit = self.slot.max_context - DRAFT_CONTEXT_MARGIN
        if len(self._context_ids) < limit:
            return
        keep = min(self.prompt_window or limit, limit // 2)
        del self._context_ids[: len(self._context_ids) - keep]
        self.slot.reset()

    def _tokens_starting_with(self, prefix: bytes) -> torch.Tensor:
        """Ids of the draft tokens whose bytes start with `prefix` (cached: tails repeat). The tokens
        sorted by their bytes once: those starting with `prefix` are one run of that order, found by
        two bisections (a scan of a 49,152-token vocabulary cost ~13 ms a new tail, a third of the
        default draft's drafting time on HumanEval)."""
        allowed = self._healing_masks.get(prefix)
        if allowed is None:
            if self._pieces_sorted is None:
                pieces = self.draft_tok.all_token_bytes()[: self._n_real]
                order = sorted(range(len(pieces)), key=pieces.__getitem__)
                self._pieces_sorted = ([pieces[i] for i in order], torch.tensor(order, dtype=torch.long))
            pieces, order = self._pieces_sorted
            first = bisect.bisect_left(pieces, prefix)
            end = bisect.bisect_right(pieces, prefix, lo=first, key=lambda piece: piece[: len(prefix)])
            allowed = order[first:end].sort().values
            if len(self._healing_masks) < 4096:
                self._healing_masks[prefix] = allowed
        return allowed

    def _pick(self, logits: torch.Tensor, threshold: float, must_start_with: bytes = b"",
              runner_up: bool = False) -> tuple[int, float, Optional[tuple[int, float]]]:
        """The draft's greedy choice among its real tokens, its confidence in it (computed only when
        a stop `threshold` needs it) and, when asked (`runner_up`, with a threshold), its second
        choice and that one's probability (None for an end token)."""
        logits = logits[: self._n_real]
        if must_start_with:
            allowed = self._tokens_starting_with(must_start_with)
            scored = logits[allowed]
            if bool(torch.isfinite(scored).any()):  # none allowed, or a reduced head scores none: unmasked
                masked = torch.full_like(logits, float("-inf"))
                masked[allowed] = scored
                logits = masked
        elif self._banned.numel():
            logits = logits.clone()
            logits[self._banned[self._banned < self._n_real]] = float("-inf")
        token = int(logits.argmax())
        if threshold <= 0:
            return token, 1.0, None
        probs = torch.softmax(logits, dim=-1)
        confidence = float(probs[token])
        if not runner_up:
            return token, confidence, None
        probs[token] = 0.0
        second = int(probs.argmax())
        return token, confidence, None if second in self._draft_eos else (second, float(probs[second]))

    def propose(self, budget: DraftBudget) -> Proposal:
        """`propose_steps` with each draft forward run at once on this drafter's slot (by hand)."""
        return run_draft_calls(self.propose_steps(budget))

    def propose_steps(self, budget: DraftBudget) -> Generator[DraftCall, torch.Tensor, Proposal]:
        """The proposal, yielding each draft forward it needs (send back the last row's logits):
        continuous batching runs the draft steps of every request in one shared forward."""
        max_draft_steps, max_target_tokens = budget.max_draft_steps, budget.max_target_tokens
        self._catch_up_seconds = 0.0
        if max_draft_steps <= 0 or max_target_tokens <= 0:
            self._proposed_draft_ids = []
            return self._proposal([])
        if self.draws_samples:
            return (yield from self._propose_sampled(budget))
        new_ids: list[int] = []
        finished = False
        # the draft's other choices it scored, where the budget asks for a tree: (tokens of the
        # proposal before it, token, chance it is right)
        branches: list[tuple[int, int, float]] = []
        wants_branches = budget.branch_confidence is not None
        heal = self.sync.pending if self.token_healing else b""
        # the draft's probability that its whole proposal so far is right: a token that would take
        # it below the threshold is worth less than the verification it costs, so it is left out
        sure_so_far = 1.0
        # tokens written before the confidence stop may end the round: the healed tail (it proposes
        # no new text by itself) and, on the translated path, MIN_TRANSLATED_DRAFT_TOKENS new ones
        must_write = (1 if heal else 0) + (0 if self.same_vocabulary else MIN_TRANSLATED_DRAFT_TOKENS)
        # re-writing the held-back tail is an extra step
        for step in range(max_draft_steps + (1 if heal else 0)):
            logits = yield from self._next_logits()
            healing_step = step == 0 and bool(heal)
            threshold = self._stop_threshold(budget, len(new_ids) + 1)
            token, confidence, second = self._pick(logits, threshold, heal if healing_step else b"",
                                                   runner_up=wants_branches and not healing_step)
            if token in self._draft_eos:
                finished = True
                break
            if second is not None:  # the draft's second choice here, and its chance
                branches.append((len(new_ids), second[0], sure_so_far * second[1]))
            if threshold > 0 and sure_so_far * confidence < threshold and len(new_ids) >= must_write:
                if wants_branches:  # its first choice where it stopped
                    branches.append((len(new_ids), token, sure_so_far * confidence))
                break
            sure_so_far *= confidence
            new_ids.append(token)
            self._context_ids.append(token)
            if self.same_vocabulary and len(new_ids) >= max_target_tokens:
                break
        self._proposed_draft_ids = new_ids
        chosen = sorted((b for b in branches if b[2] >= budget.branch_confidence), key=lambda b: -b[2]
                        )[:MAX_ALTERNATIVES] if wants_branches else []
        alternatives = [new_ids[:at] + [token] for at, token, _ in chosen]
        if self.same_vocabulary:
            return self._as_tree([ids[:max_target_tokens] for ids in [new_ids, *alternatives]], sure_so_far)
        started = time.perf_counter()
        # the main chain without the target token its text may still change (a longer draft text
        # could merge into it), then, in a tree, whole, as a branch with that token (always: proposing
        # it only where the chain before it was likely kept measured the same); the alternatives whole
        # too: a branch ends the round's text, and a token the target would have written longer costs
        # a row only
        whole, stable = self._translate(new_ids, finished, max_target_tokens)
        chains = [whole[:stable]]
        if wants_branches:
            chains += [whole, *(self._translate(ids, True, max_target_tokens)[0] for ids in alternatives)]
        return self._as_tree(chains, sure_so_far, translate_seconds=time.perf_counter() - started)

    def _as_tree(self, chains: list[list[int]], confidence: float, translate_seconds: float = 0.0) -> Proposal:
        """The proposal of `chains` (target ids; the first is the main one) merged as a tree: a chain
        when the others add nothing to it."""
        target_ids, parents = merge_chains(chains)
        proposal = self._proposal(target_ids, confidence, translate_seconds)
        if len(target_ids) > len(chains[0]):
            proposal = replace(proposal, parents=tuple(parents), main_length=len(chains[0]))
        return proposal

    def _translate(self, new_draft_ids: list[int], finished: bool, max_target_tokens: int) -> tuple[list[int], int]:
        """Target ids for the draft's new tokens (at most `max_target_tokens`) and how many of them are
        stable (more draft text cannot change them; all of them when the draft `finished`)."""
        text = self.draft_tok.decode_bytes(new_draft_ids)
        proposed = self.sync.strip_pending(text)
        if not proposed:
            return [], 0
        translation = self.translator.draft_to_target(proposed, draft_finished=finished)
        ids = list(translation.target_ids[:max_target_tokens])
        return ids, min(translation.n_stable, len(ids))

    def _propose_sampled(self, budget: DraftBudget) -> Generator[DraftCall, torch.Tensor, Proposal]:
        """Token-level intersection sampling: each draft token is the draft's keyed sample among the
        tokens the target also has (identical bytes), read with the target's noise at the position
        it is proposed for; each sampled draft token IS a target token."""
        from anypair.sampling import sample_draft_token

        if self.sync is not None and self.sync.pending:
            # the committed text ends inside a UTF-8 character the draft cannot write yet: its next
            # token would not continue the target's text, so this round is one target sample
            self._proposed_draft_ids = []
            return self._proposal([])
        assert self.noise is not None  # checked at construction
        target_rows = self.vocab_map.target_to_draft.shape[0]
        sure_so_far = 1.0
        new_ids: list[int] = []
        target_ids: list[int] = []
        for offset in range(min(budget.max_draft_steps, budget.max_target_tokens)):
            threshold = self._stop_threshold(budget, offset + 1)
            logits = yield from self._next_logits()
            noise_row = self.noise.exponential(self._next_position + offset, target_rows)
            picked = sample_draft_token(logits, self.vocab_map, self.sampling, noise_row)
            if picked is None:
                break
            draft_id, target_id, q_target = picked
            # the draft's probability of its own pick stands in for how likely the target is to
            # keep it (the policy calibrates it against what the target actually accepted)
            confidence = float(q_target[target_id])
            if threshold > 0 and sure_so_far * confidence < threshold:
                break
            sure_so_far *= confidence
            new_ids.append(draft_id)
            self._context_ids.append(draft_id)
            target_ids.append(target_id)
        self._proposed_draft_ids = new_ids
        if not target_ids:
            return self._proposal([])
        return self._proposal(target_ids, sure_so_far)

    # -- after verification ------------------------------------------------------------------
    def commit(self, new_target_ids: Sequence[int]) -> None:
        self._next_position += len(new_target_ids)
        proposed = self._proposed_draft_ids
        self._proposed_draft_ids = []
        if self.same_vocabulary:
            self._commit_same_vocabulary(list(new_target_ids), proposed)
            return
        committed = self.target_tok.decode_bytes(new_target_ids)
        realignment = self.sync.commit(committed, proposed, hold_back_last_token=self.token_healing)
        kept = len(self._context_ids) - realignment.n_drop
        del self._context_ids[kept:]
        self._context_ids.extend(realignment.append_draft_ids)
        self._keep_own_tokens([*realignment.append_draft_ids, realignment.held_back_id])
        if self.slot.cached_length > kept:
            self.slot.crop(kept)

    def _keep_own_tokens(self, ids: Sequence[Optional[int]]) -> None:
        """Committed text's tokens join the request's own (a name the target wrote is likely again)."""
        new = {i for i in ids if i is not None} - self._own_tokens
        if new:
            self._own_tokens |= new
            self.slot.keep_head_tokens(self._own_tokens)

    def _commit_same_vocabulary(self, new_target_ids: list[int], proposed: list[int]) -> None:
        agree = 0
        for a, b in zip(proposed, new_target_ids):
            if a != b:
                break
            agree += 1
        kept = len(self._context_ids) - len(proposed) + agree
        del self._context_ids[kept:]
        self._context_ids.extend(new_target_ids[agree:])
        self._keep_own_tokens(new_target_ids[agree:])
        if self.slot.cached_length > kept:
            self.slot.crop(kept)
