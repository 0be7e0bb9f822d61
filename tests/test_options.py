"""Options resolved once (`GeneratorOptions`, `GenerationRequest`) and the pure request planner
(`plan_request`): checked and planned without loading a model."""
from __future__ import annotations

import dataclasses
import pytest
import torch

from anypair.drafters.base import NoDrafter  # any Drafter instance: the options pass it as itself
from anypair.errors import InputError
from anypair.generation.options import (
    GenerationRequest,
    GeneratorOptions,
    PairFacts,
    plan_request,
)
from anypair.policies import AdaptiveLength, ConstantLength, HeuristicLength, TimedCosts

WITH_DRAFT = PairFacts(has_draft_model=True)
WITHOUT_DRAFT = PairFacts(has_draft_model=False)
GREEDY = GenerationRequest.of("def f():")
SEEDED = GenerationRequest.of("def f():", do_sample=True, temperature=0.7, seed=3)
UNSEEDED = GenerationRequest.of("def f():", do_sample=True, temperature=0.7)


# -- GeneratorOptions --------------------------------------------------------------------------------

def test_options_are_frozen_after_construction():
    options = GeneratorOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.draft_length = "constant"  # type: ignore[misc]


def test_weight_names_are_normalised_and_dtype_is_the_older_name_of_weights():
    assert GeneratorOptions(weights="float16", draft_weights="bfloat16").weights == "fp16"
    assert GeneratorOptions(weights="float16", draft_weights="bfloat16").draft_weights == "bf16"
    assert GeneratorOptions.of(dtype=torch.float32).weights == "fp32"
    assert GeneratorOptions.of(dtype="bf16").weights == "bf16"
    assert GeneratorOptions.of().weights == "auto"
    with pytest.raises(InputError, match="not both"):
        GeneratorOptions.of(weights="fp16", dtype="fp32")
    with pytest.raises(InputError, match="dtype"):
        GeneratorOptions.of(dtype=torch.int8)


def test_device_defaults_to_each_engines_own_and_a_bad_one_is_refused():
    assert GeneratorOptions().device is None  # the gguf engine: the CPU; torch: the GPU when there is one
    assert GeneratorOptions.of(device="cpu").device == "cpu"
    with pytest.raises(InputError, match="not a torch device"):
        GeneratorOptions.of(device="gpu0")


@pytest.mark.parametrize("options, named", [
    ({"num_draft_tokens": 0}, "num_draft_tokens"), ({"num_draft_tokens": 2.5}, "num_draft_tokens"),
    ({"num_draft_tokens": True}, "num_draft_tokens"), ({"confidence_threshold": -0.1}, "confidence_threshold"),
    ({"threads": 0}, "threads"), ({"drafter": "fast"}, "drafter"), ({"draft_length": "quick"}, "draft_length"),
    ({"sampled_drafts": "random"}, "sampled_drafts"), ({"weights": "fp8"}, "weights"),
    ({"draft_weights": "q4"}, "weights"), ({"engine": "onnx"}, "engine"), ({"draft_engine": "vllm"}, "draft_engine"),
    ({"backend": "openvino"}, "backend"), ({"linear_kernel": "blas"}, "linear_kernel"), ({"context": 8}, "context"),
    ({"device": 0}, "device"), ({"draft_window": -1}, "draft_window"), ({"draft_window": 1.5}, "draft_window"),
])
def test_each_bad_option_is_a_one_line_input_error_naming_it(options, named):
    with pytest.raises(InputError, match=named) as caught:
        GeneratorOptions(**options)
    assert "\n" not in str(caught.value)


def test_a_hybrid_drafter_without_a_draft_model_is_refused_before_loading():
    from anypair import AnyPairGenerator

    # the error names the drafter, not the missing folder: nothing was loaded first
    with pytest.raises(InputError, match="hybrid"):
        AnyPairGenerator("/no/such/model/folder", None, drafter="hybrid")


# -- GenerationRequest -------------------------------------------------------------------------------

def test_a_request_keeps_its_arguments_in_checked_form():
    request = GenerationRequest.of(messages=[{"role": "user", "content": "hi"}], max_new_tokens=7, stop="\n\n",
                                   do_sample=True, temperature=0.5, top_p=0.9, seed=1, assisted=False)
    assert request.prompt is None and request.messages == ({"role": "user", "content": "hi"},)
    assert request.stop_strings == ("\n\n",) and request.max_new_tokens == 7 and not request.assisted
    assert request.sampling.temperature == 0.5 and request.sampling.top_p == 0.9 and request.sampling.seed == 1
    assert GenerationRequest.of("x", stop=["a", "b"]).stop_strings == ("a", "b")
    assert not request.ignore_eos and GenerationRequest.of("x", ignore_eos=True).ignore_eos


@pytest.mark.parametrize("arguments, fragment", [
    ({}, "exactly one"), ({"prompt": "x", "messages": [{"role": "user", "content": "y"}]}, "exactly one"),
    ({"prompt": ""}, "empty"), ({"prompt": "x", "max_new_tokens": 0}, "max_new_tokens"),
    ({"prompt": "x", "stop": [""]}, "stop"), ({"prompt": "x", "stop": [3]}, "stop"),
    ({"prompt": "x", "do_sample": True, "temperature": 0}, "temperature"),
    ({"prompt": "x", "ignore_eos": "yes"}, "ignore_eos"),
])
def test_bad_requests_are_refused(arguments, fragment):
    with pytest.raises(InputError, match=fragment):
        GenerationRequest.of(**arguments)


# -- plan_request ------------------------------------------------------------------------------------

@pytest.mark.parametrize("drafter, pair, request_, expected", [
    ("model", WITH_DRAFT, GREEDY, "model"),
    ("model", WITHOUT_DRAFT, GREEDY, "none"),  # AnyPairGenerator(target): the target alone
    ("lookup", WITHOUT_DRAFT, GREEDY, "lookup"),
    ("hybrid", WITH_DRAFT, GREEDY, "hybrid"),
    ("model", WITH_DRAFT, GenerationRequest.of("x", assisted=False), "none"),
    ("hybrid", WITH_DRAFT, GenerationRequest.of("x", assisted=False), "none"),
])
def test_the_plan_names_the_drafter(drafter, pair, request_, expected):
    plan = plan_request(GeneratorOptions(drafter=drafter), request_, pair)
    assert plan.drafter == expected
    assert plan.drafts_with_model == (expected in ("model", "hybrid"))


def test_a_drafter_instance_is_planned_as_given():
    assert plan_request(GeneratorOptions(drafter=NoDrafter()), GREEDY, WITHOUT_DRAFT).drafter == "given"


def test_sampling_requests_get_the_sampling_verifier():
    assert plan_request(GeneratorOptions(), GREEDY, WITH_DRAFT).verifier == "greedy"
    assert plan_request(GeneratorOptions(), UNSEEDED, WITH_DRAFT).verifier == "sampling"


def test_seeded_sampling_plans_like_any_request():
    """The keyed verifier makes a seed's text independent of the policy, so a seeded request gets
    the same drafter and the same timed adaptive policy as a greedy one."""
    seeded, greedy = (plan_request(GeneratorOptions(), request, WITH_DRAFT) for request in (SEEDED, GREEDY))
    assert seeded.drafter == greedy.drafter == "model"
    assert type(seeded.policy) is type(greedy.policy) is AdaptiveLength
    assert isinstance(seeded.policy.expected_rate.costs, TimedCosts)
    assert isinstance(seeded.policy.confidence_stop.costs, TimedCosts)


def test_the_policy_follows_draft_length_and_num_draft_tokens():
    constant = plan_request(GeneratorOptions(draft_length="constant", num_draft_tokens=3), GREEDY, WITH_DRAFT).policy
    assert isinstance(constant, ConstantLength) and constant.next_length() == 3
    heuristic = plan_request(GeneratorOptions(draft_length="heuristic", num_draft_tokens=4), GREEDY, WITH_DRAFT).policy
    assert isinstance(heuristic, HeuristicLength) and heuristic.next_length() == 4
    adaptive = plan_request(GeneratorOptions(num_draft_tokens=2), GREEDY, WITH_DRAFT).policy
    assert isinstance(adaptive, AdaptiveLength) and adaptive.next_length() == 2
    given = ConstantLength(1)
    assert plan_request(GeneratorOptions(draft_length=given), GREEDY, WITH_DRAFT).policy is given


def test_planning_is_pure():
    options = GeneratorOptions(draft_length="constant", num_draft_tokens=3)
    first, second = (plan_request(options, SEEDED, WITH_DRAFT) for _ in range(2))
    assert (first.drafter, first.verifier) == (second.drafter, second.verifier)
    assert first.policy is not second.policy  # a policy has per-request state: each plan gets its own
    assert options == GeneratorOptions(draft_length="constant", num_draft_tokens=3)


# -- one declaration of each name ----------------------------------------------------------------------


def _choices(parser, command: str, flag: str) -> list:
    subparsers = next(a for a in parser._actions if a.choices and command in a.choices)
    return next(a for a in subparsers.choices[command]._actions if flag in a.option_strings).choices


def test_drafter_and_policy_names_come_from_their_registries():
    """The CLI's choices, the options' check and the policy factory read `DRAFTERS` and `POLICIES`:
    each name is accepted everywhere, builds what it names, and an unknown one is refused naming them."""
    from anypair.cli import build_parser
    from anypair.drafters import DRAFTERS
    from anypair.policies import POLICIES, make_policy

    parser = build_parser()
    for command in ("generate", "serve", "bench"):
        assert _choices(parser, command, "--drafter") == list(DRAFTERS)
        assert _choices(parser, command, "--draft-length") == list(POLICIES)
    for name in DRAFTERS:
        assert GeneratorOptions(drafter=name).drafter == name
    for name in POLICIES:
        assert make_policy(name).name == name == GeneratorOptions(draft_length=name).draft_length
    with pytest.raises(InputError, match=", ".join(DRAFTERS)):
        GeneratorOptions(drafter="oracle")
    with pytest.raises(InputError, match=", ".join(POLICIES)):
        GeneratorOptions(draft_length="longest")


def test_the_engine_help_names_every_architecture_of_the_gguf_engine():
    from anypair.backends.quantized_gguf import ARCHITECTURES
    from anypair.cli import GGUF_ENGINE_RUNS, build_parser

    assert GGUF_ENGINE_RUNS.split(", ") == list(ARCHITECTURES)
    generate = next(a for a in build_parser()._actions if a.choices and "generate" in a.choices).choices["generate"]
    assert GGUF_ENGINE_RUNS in " ".join(generate.format_help().split())
