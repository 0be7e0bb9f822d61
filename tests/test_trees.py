"""A tree of candidate rows scored in one forward of the GGUF engine: each row's logits are bitwise
those of the same row in a chain of its ancestors (beside another sequence's rows in the same call,
and on the scalar reference path), and keeping any root-to-leaf path leaves the cache exactly as
that chain leaves it (the next forward's logits equal the chain's).

SmolLM2-135M (llama) is the model: the property is mechanical, not the model's."""
from __future__ import annotations

import pytest
import torch

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
PROMPT = list(range(400, 431))
OTHER = list(range(600, 609))  # another sequence's prompt, in slot 1
# root r, then a -> b -> c (the main chain) and a -> x -> y, and r -> z (a sibling of a)
TREE_IDS = [17, 301, 302, 303, 911, 912, 77]
TREE_PARENTS = [-1, 0, 1, 2, 1, 4, 0]
PATHS = {"main": [0, 1, 2, 3], "branch": [0, 1, 4, 5], "sibling": [0, 6], "main prefix": [0, 1]}


@pytest.fixture(scope="module")
def engine():
    from anypair.backends.quantized_gguf import QuantizedGGUFBackend
    from anypair.zoo.registry import ZOO_MODELS
    from anypair.zoo.served_gguf import gguf_file

    return QuantizedGGUFBackend(gguf_file(ZOO_MODELS[SMOL], progress=False), name="tree", threads=2, context=128,
                                slots=2)


def _chain_then_next(engine, rows):
    """Logits of the chain of TREE_IDS rows `rows` after the prompt, alone, and of the two rows after it."""
    engine.set_slots(2)
    engine.extend_slot(0, PROMPT, all_logits=False)
    chain = engine.extend_slot(0, [TREE_IDS[r] for r in rows], all_logits=True)
    return chain, engine.extend_slot(0, [55, 56], all_logits=True)


def test_tree_rows_equal_their_chains_bitwise_and_any_path_can_be_kept(engine):
    from anypair.backends.base import SequenceRows

    expected = {name: _chain_then_next(engine, rows) for name, rows in PATHS.items()}
    engine.set_slots(2)
    engine.extend_slot(1, OTHER, all_logits=False)
    other_alone = engine.extend_slot(1, [5, 6, 7], all_logits=True)
    for name, rows in PATHS.items():
        engine.set_slots(2)
        engine.extend_slot(0, PROMPT, all_logits=False)
        engine.extend_slot(1, OTHER, all_logits=False)
        # the tree beside another sequence's chain of 3 rows, in one forward
        other, tree = engine.forward_rows([SequenceRows(1, [5, 6, 7]), SequenceRows(0, TREE_IDS, "all", TREE_PARENTS)])
        assert torch.equal(other, other_alone)
        for each, each_rows in PATHS.items():
            assert torch.equal(tree[each_rows], expected[each][0]), each
        engine.sequence(0).keep_path(rows)
        assert engine.slot_length(0) == len(PROMPT) + len(rows)
        assert torch.equal(engine.extend_slot(0, [55, 56], all_logits=True), expected[name][1]), name


def test_the_reference_path_scores_a_tree_as_its_chains(engine):
    """The layer stack alone (no head): tree rows on the scalar reference equal the chains' rows there."""
    from anypair.kernels import dequant_rows

    def rows_of(ids, parents=None):
        engine.set_slots(1)
        engine.set_slots(2)  # fresh caches
        engine.stack.forward_seqs(dequant_rows(engine.embedding, PROMPT), [(len(PROMPT), 0, 0)], 2, use_reference=True)
        return engine.stack.forward_seqs(dequant_rows(engine.embedding, ids), [(len(ids), len(PROMPT), 0)], 2,
                                         use_reference=True, parents=parents)

    tree = rows_of(TREE_IDS, TREE_PARENTS)
    for rows in PATHS.values():
        assert torch.equal(tree[rows], rows_of([TREE_IDS[r] for r in rows]))


@pytest.mark.parametrize("parents", [[0, 0, 1], [-1, 1, 0], [-1, -1, 1], [-1, 0]])
def test_a_malformed_tree_is_refused_in_one_line(engine, parents):
    from anypair.backends.base import SequenceRows
    from anypair.errors import InputError

    engine.set_slots(2)
    engine.extend_slot(0, PROMPT, all_logits=False)
    with pytest.raises(InputError, match="one parent a row"):
        engine.forward_rows([SequenceRows(0, [1, 2, 3], "all", parents)])
    assert engine.slot_length(0) == len(PROMPT)


def test_an_engine_of_chains_refuses_a_tree():
    from anypair.backends.base import ModelBackend, SequenceRows
    from anypair.errors import InputError

    class Chains(ModelBackend):
        vocab_size, max_context, cached_length = 10, 10, 0

        def extend(self, ids, all_logits=False):  # pragma: no cover - refused before
            raise AssertionError("a tree reached extend")

        def crop(self, length):  # pragma: no cover
            pass

        def reset(self):  # pragma: no cover
            pass

    with pytest.raises(InputError, match="chains only"):
        Chains().forward_rows([SequenceRows(0, [1, 2], "all", [-1, 0])])


# -- a tree's round: proposal, verifiers, the loop -------------------------------------------------

def test_chains_merge_into_a_tree_with_the_main_chain_first():
    from anypair.drafters.model import merge_chains

    ids, parents = merge_chains([[5, 6, 7], [5, 6, 9, 4], [8], [5, 6, 7]])
    assert ids == [5, 6, 7, 9, 4, 8] and parents == [-1, 0, 1, 1, 3, -1]
    assert merge_chains([[1, 2], [1, 2, 3]]) == ([1, 2, 3], [-1, 0, 1])  # a longer chain: still a chain


def test_a_tree_proposal_knows_its_main_chain_rows_and_truncation():
    from anypair.types import Proposal

    tree = Proposal([5, 6, 7, 9, 8], parents=(-1, 0, 1, 1, -1))
    assert tree.chain_length == 3 and tree.main_chain() == Proposal([5, 6, 7])
    assert tree.row_parents() == [-1, 0, 1, 2, 2, 0]
    assert tree.truncated(4).parents == (-1, 0, 1, 1) and tree.truncated(2).parents is None
    assert Proposal([1, 2]).row_parents() is None and Proposal([1, 2]).chain_length == 2


def _rows_choosing(choices, vocab=20):
    logits = torch.zeros(len(choices), vocab)
    for row, token in enumerate(choices):
        logits[row, token] = 1.0
    return logits


def test_greedy_tree_verification_follows_the_targets_choices_into_a_branch():
    from anypair.types import Proposal
    from anypair.verifiers.greedy import GreedyVerifier

    tree = Proposal([5, 6, 7, 9, 4, 8], parents=(-1, 0, 1, 1, 3, -1))
    # rows: root, 5, 6, 7, 9, 4, 8; the target writes 5, 6, 9, 4, then 11
    logits = _rows_choosing([5, 6, 9, 0, 4, 11, 0])
    outcome = GreedyVerifier().verify(logits, tree)
    assert outcome.path == (0, 1, 3, 4) and outcome.next_target_id == 11 and outcome.n_accepted == 4
    assert outcome.accepted_ids(tree) == [5, 6, 9, 4] and outcome.scored_rows() == [0, 1, 2, 4, 5]
    # the root's choice is the other root child
    outcome = GreedyVerifier().verify(_rows_choosing([8, 0, 0, 0, 0, 0, 3]), tree)
    assert outcome.path == (5,) and outcome.next_target_id == 3


def test_keyed_sampling_on_a_tree_emits_the_targets_own_samples():
    """The keyed verifier on a tree whose branch holds the target's samples emits what it emits on
    a chain of those samples (the text is the target's own with that seed), and its position moves
    by the tokens emitted."""
    from anypair.types import Proposal, SamplingConfig
    from anypair.verifiers.sampling import SamplingVerifier

    cfg = SamplingConfig(do_sample=True, temperature=1.0, seed=7)
    logits = torch.randn(6, 30, generator=torch.Generator().manual_seed(3))

    def fresh():
        verifier = SamplingVerifier(cfg)
        verifier.first_token(logits[0])
        return verifier

    probe = fresh()
    samples = [probe.target_sample(logits[0], 1), probe.target_sample(logits[1], 2), probe.target_sample(logits[2], 3)]
    chain = fresh().verify(logits[:3], Proposal(samples[:2]))
    wrong = (samples[1] + 1) % 30
    tree = Proposal([samples[0], wrong, samples[1]], parents=(-1, 0, 0))  # rows: root, s0, wrong, s1
    verifier = fresh()
    outcome = verifier.verify(torch.stack([logits[0], logits[1], logits[5], logits[2]]), tree)
    assert outcome.accepted_ids(tree) == samples[:2] and outcome.next_target_id == chain.next_target_id
    assert verifier.position == 1 + 3


