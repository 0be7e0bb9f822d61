"""The `anypair` command line: fetch, inspect, generate, serve, bench."""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from anypair.drafters import DRAFTERS, uses_draft_model
from anypair.errors import AnyPairError, InputError
from anypair.generation.checks import engine_options
from anypair.policies import POLICIES

from anypair.zoo.registry import DEFAULT_DRAFT, DEFAULT_TARGET


#: the architectures of the gguf engine (`backends.quantized_gguf.ARCHITECTURES`, which imports torch:
#: named here for the help, tests/test_options.py checks that the two agree)
GGUF_ENGINE_RUNS = "llama, qwen2, qwen3, phi3, gemma2, gemma3"


def _add_model_args(p: argparse.ArgumentParser, max_new_tokens: Optional[int] = 128) -> None:
    """The model and engine flags `generate`, `serve` and `bench` share; `max_new_tokens=None`: by default
    a request runs to the end of its answer (within the context)."""
    p.add_argument("-m", "--model", default=DEFAULT_TARGET, help=f"target model (default {DEFAULT_TARGET})")
    p.add_argument("-a", "--assistant-model", default=DEFAULT_DRAFT, help=f"draft model (default {DEFAULT_DRAFT})")
    p.add_argument("--drafter", choices=list(DRAFTERS), default=next(iter(DRAFTERS)),
                   help="; ".join(f"{d.name}: {d.summary}" for d in DRAFTERS.values()))
    p.add_argument("--draft-length", choices=list(POLICIES), default=next(iter(POLICIES)))
    p.add_argument("-k", "--num-draft-tokens", type=int, default=None,
                   help="draft length: the constant one, the heuristic's start, or the adaptive policy's cap")
    p.add_argument("--confidence-threshold", type=float, default=None,
                   help="end a draft round once the draft's probability that its proposal is right falls below "
                        "this (default: set by the adaptive policy from measured costs; 0: off)")
    p.add_argument("--draft-window", type=int, default=None,
                   help="the draft reads only the last N tokens of its prompt (0: the whole prompt; default: by the "
                        "draft's cost, 256 for SmolLM2-135M, fewer for a dearer draft)")
    p.add_argument("--always-draft", dest="skip_losing_drafts", action="store_false",
                   help="draft on every request (default: while drafting lost time on the server's or run's recent "
                        "requests, run the target alone and retry drafting every few requests)")
    p.add_argument("--weights", "--dtype", dest="weights", choices=["auto", "fp32", "fp16", "bf16"], default="auto",
                   help="target weights on the torch engine (default auto: a GGUF-sourced target runs on the GGUF "
                        "engine; otherwise the fastest batch-invariant format of "
                        "this machine, checked at load; fp16 = fp16 weights with fp32 math on AVX2 CPUs)")
    p.add_argument("--draft-weights", choices=["auto", "fp32", "fp16", "bf16", "int8"], default="auto",
                   help="draft weights when the draft runs on torch (int8: dynamic int8, drafts only)")
    p.add_argument("--engine", choices=list(engine_options()), default="auto",
                   help="target engine (auto: gguf, anypair's exact engine on the GGUF's own blocks, for a target "
                        f"with a GGUF (zoo models, .gguf files) of an architecture it runs ({GGUF_ENGINE_RUNS}); "
                        "llama.cpp for a .gguf of another; torch otherwise)")
    p.add_argument("--draft-engine", choices=list(engine_options()), default="auto",
                   help=f"draft engine (auto: gguf for a draft with a GGUF of {GGUF_ENGINE_RUNS}, as the default "
                        "pair's; llama.cpp for another GGUF when llama-cpp-python is installed; torch otherwise)")
    p.add_argument("--context", type=int, default=None,
                   help="context length (default: the gguf engine the model's trained context as far as memory holds its KV cache, llama.cpp min(trained, 8192))")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--device", default=None,
                   help="torch device of the torch engine's members: cpu, cuda, cuda:N (default: each engine's own: "
                        "the gguf and llama.cpp engines run on the CPU, torch on the GPU when there is one)")
    p.add_argument("--linear-kernel", choices=["auto", "skinny", "torch"], default="auto",
                   help="CPU kernel for the models' linear layers: auto (time both, keep the faster), "
                        "skinny (anypair's blocked kernel for few-token steps) or torch")
    if max_new_tokens is None:
        p.add_argument("--max-new-tokens", type=int, default=None,
                       help="cap on the tokens generated (default: up to the model's end-of-turn token, bounded by "
                            "the context, as llama.cpp's CLI)")
    else:
        p.add_argument("--max-new-tokens", type=int, default=max_new_tokens)


def _generator_options(args) -> dict:
    """The AnyPairGenerator options that `generate` and `bench` share."""
    return dict(draft_length=args.draft_length, num_draft_tokens=args.num_draft_tokens, weights=args.weights,
                threads=args.threads, device=args.device, draft_weights=args.draft_weights, engine=args.engine,
                draft_engine=args.draft_engine, context=args.context, linear_kernel=args.linear_kernel,
                confidence_threshold=args.confidence_threshold, skip_losing_drafts=args.skip_losing_drafts,
                **({} if args.draft_window is None else dict(draft_window=args.draft_window)))


def _checked_options(args, drafter: str):
    """The generator's options from the flags, checked before two models load (seconds to minutes)
    only to fail then."""
    from anypair.generation.options import GeneratorOptions

    return GeneratorOptions.of(drafter=drafter, **_generator_options(args))


def _load_pair(args, options, assisted: bool = True):
    """The generator of `generate` and `serve`: the target and, unless the options need none, the draft."""
    from anypair.generation.generator import AnyPairGenerator

    draft = args.assistant_model if assisted and uses_draft_model(options.drafter) else None
    return AnyPairGenerator.from_options(args.model, draft, options)


def run_generate(args) -> int:
    from rich.console import Console

    from anypair.generation.checks import check_text
    from anypair.types import SamplingConfig

    # --no-assisted runs the target alone: no draft model to load, whatever --drafter says
    options = _checked_options(args, drafter="model" if args.no_assisted else args.drafter)
    check_text(args.prompt, "the prompt")
    SamplingConfig(do_sample=args.do_sample, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                   seed=args.seed)
    # stats lines stay whole lines whatever the terminal's width (and in a log)
    console = Console(stderr=True, soft_wrap=True)
    gen = _load_pair(args, options, assisted=not args.no_assisted)
    chat = not args.raw and gen.target.has_chat_template
    request = dict(stop=args.stop or None, do_sample=args.do_sample, temperature=args.temperature, top_k=args.top_k,
                   top_p=args.top_p, seed=args.seed, assisted=not args.no_assisted)
    if chat:
        request["messages"] = [{"role": "user", "content": args.prompt}]
    else:
        request["prompt"] = args.prompt
    request["max_new_tokens"] = _room_for_answer(gen, request) if args.max_new_tokens is None else args.max_new_tokens
    if args.stream:
        stream = gen.stream(**request)
        for chunk in stream:
            sys.stdout.write(chunk)
            sys.stdout.flush()
        sys.stdout.write("\n")
        result = stream.result
    else:
        result = gen.generate(**request)
        print(result.text)
    s = result.stats
    mode = "target alone" if args.no_assisted else f"{args.drafter} drafter"
    console.print(
        f"[dim]{mode}: {s.new_tokens} tokens in {s.total_time_s:.2f}s = {s.tokens_per_second:.2f} tok/s; "
        f"time to first token {1000 * s.time_to_first_token_s:.0f} ms; rounds {s.rounds}; "
        f"acceptance {s.acceptance_rate:.2f}; accepted/round {s.mean_accepted_per_round:.2f}; "
        f"drafting {s.time_drafting_s:.2f}s, translating {s.time_translating_s:.3f}s, verifying {s.time_verifying_s:.2f}s; "
        f"finish: {result.finish_reason}[/dim]")
    console.print(f"[dim]engines: {gen.engines}[/dim]")
    if s.draft_failed:
        console.print(f"[yellow]drafting was disabled: {s.draft_failure_reason}[/yellow]")
    if s.drafting_skipped:
        console.print(f"[yellow]{s.drafting_skipped}[/yellow]")
    return 0


def _room_for_answer(gen, request: dict) -> int:
    """The default cap of `generate`: all the context leaves after the prompt."""
    room = gen.room_for_new_tokens(request.get("prompt"), messages=request.get("messages"),
                                   assisted=request["assisted"])
    if room < 1:
        raise InputError("the prompt fills the model's context (no room left for an answer): shorten it, "
                         "or give a longer --context")
    return room


def run_serve(args) -> int:
    import logging

    from anypair.serving.app import ServeSettings, create_app
    from anypair.serving.server import listening_socket, run_server

    options = _checked_options(args, drafter=args.drafter)
    if args.queue_size < 1:
        raise InputError(f"--queue-size must be at least 1 (requests that may wait while one generates), "
                         f"got {args.queue_size}")
    if args.max_new_tokens < 1:
        raise InputError(f"--max-new-tokens must be a positive integer, got {args.max_new_tokens}")
    if args.kv_memory is not None and not args.kv_memory > 0:
        raise InputError(f"--kv-memory must be a positive number of MiB, got {args.kv_memory}")
    # the port is taken before the models load: a busy port fails in a second, not after a minute
    sock = listening_socket(args.host, args.port)
    gen = _load_pair(args, options)
    max_batch, batch_note = _max_batch(gen, args.max_batch, args.kv_memory)
    settings = ServeSettings(model_name=args.model_name or str(args.model), queue_size=args.queue_size,
                             max_batch=max_batch, default_max_tokens=args.max_new_tokens,
                             allowed_origins=tuple(args.allow_origin),
                             accept_unknown_fields=args.accept_unknown_fields)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    log = logging.getLogger("anypair.serving")
    log.addHandler(handler)
    log.setLevel(logging.INFO)

    def ready(url: str) -> None:
        # stdout is the answer: the address, for a script to read; the rest goes to stderr
        print(f"anypair serve: {settings.model_name} at {url}/v1", flush=True)
        print(f"engines: {gen.engines}; batch: {batch_note}; queue: {settings.queue_size}; Ctrl-C stops",
              file=sys.stderr, flush=True)

    # generation runs on the server's worker thread: the threads of the pool that loaded the models
    # here would make OpenMP wait passively everywhere (see release_thread_pool)
    from anypair.kernels.build import release_thread_pool

    release_thread_pool()
    run_server(create_app(gen, settings), sock, ready)
    return 0


#: requests batched at most by default (more rows a call stop paying on a small CPU), and the share of
#: the memory available at start that their KV caches may take at the full context
DEFAULT_MAX_BATCH = 8
KV_MEMORY_SHARE = 0.5


def _max_batch(gen, asked: Optional[int], kv_memory_mib: Optional[float] = None) -> tuple[int, str]:
    """--max-batch as asked, or by default from the KV memory budget (--kv-memory MiB, default half the memory
    available now, less the weights mapped from the page cache): as many requests as fit their KV caches
    at the full context, at most DEFAULT_MAX_BATCH; 1 where the engines cannot batch. Where even those
    requests at the full context would not fit the budget, each request is held to the positions that do
    (`limit_positions`): a longer one gets a 400 naming the budget, never an out-of-memory kill
    mid-answer. Returns the batch and a note for the start line. The generator's scheduler checks the
    batch when the server is made; `run_serve` checks --kv-memory before the models load."""
    per_slot = gen.kv_bytes_per_slot()
    if kv_memory_mib is not None:
        budget = kv_memory_mib * 2**20
    else:
        from anypair.machine import available_memory

        # mapped weights sit in the page cache, which MemAvailable counts as free: not the KV's to take
        mapped = sum(b.mapped_weight_bytes for b in (gen.target_backend, gen.draft_backend) if b is not None)
        budget = max(0, available_memory() - mapped) * KV_MEMORY_SHARE or None
    why_not = gen.batching_unavailable()
    if why_not is not None:  # a --max-batch above 1 is refused in one line when the scheduler is made
        batch, note = (1 if asked is None else asked), f"one request at a time ({why_not})"
    else:
        batch = asked if asked is not None else max(1, min(DEFAULT_MAX_BATCH, int(budget // per_slot))) if budget else 1
        note = f"up to {batch} requests at once, KV {per_slot / 2**20:.0f} MiB per slot at the full context"
    if budget is not None and batch * per_slot > budget:
        per_position = gen.kv_bytes_per_position()
        positions = int(budget // batch // per_position)
        gen.limit_positions(positions, f"the server's KV memory budget of {budget / 2**20:.0f} MiB for {batch} "
                                       f"request(s) at once (--kv-memory, --max-batch)")
        note += f"; {positions} positions a request (the KV memory budget)"
    return batch, note


def run_bench_cmd(args) -> int:
    from anypair.benchmarking.bench import run_bench
    from anypair.benchmarking.prompts import humaneval_prompts, prompts_from_file
    from anypair.benchmarking.report import format_report, save_json

    if args.target_shape:
        from anypair.benchmarking.seed_bench import run_target_shape_cmd

        return run_target_shape_cmd(args, _contexts(args.verify_contexts))
    _checked_options(args, drafter="model")
    if args.prefill is not None:
        from anypair.benchmarking.prefill import run_prefill_cmd

        return run_prefill_cmd(args)
    if args.sweep:
        from anypair.benchmarking.sweep import run_sweep_cmd

        return run_sweep_cmd(args, _generator_options(args))
    if args.n < 1 or args.repeats < 1:
        raise InputError(f"--n and --repeats must be at least 1, got {args.n} and {args.repeats}")
    prompts = prompts_from_file(args.prompts, args.n) if args.prompts else humaneval_prompts(args.n)
    drafters = [d.strip() for d in (args.drafters or args.drafter).split(",") if d.strip()]
    unknown = sorted(set(drafters) - set(DRAFTERS))
    if unknown or not drafters:
        raise InputError(f"unknown drafter(s) {unknown or repr(args.drafters)}: choose among {', '.join(DRAFTERS)}")
    draft = args.assistant_model if any(uses_draft_model(d) for d in drafters) else None
    if args.regret:
        return _run_regret(args, prompts, drafters, draft)
    contexts = _contexts(args.verify_contexts)
    report = run_bench(args.model, draft, prompts, max_new_tokens=args.max_new_tokens, drafters=drafters,
                       compare_hf=args.compare_hf, compare_llama_cpp=not args.no_llama_cpp, chat=args.chat,
                       repeats=args.repeats, verify_contexts=contexts, roofline=args.roofline,
                       **_generator_options(args))
    print(format_report(report))
    if args.json:
        save_json(report, args.json)
        print(f"saved {args.json}")
    return 0


def _run_regret(args, prompts, drafters, draft) -> int:
    """`anypair bench --regret`: the shipped policy beside every fixed draft length, per prompt."""
    from anypair.benchmarking.regret import format_regret, run_regret

    try:
        lengths = tuple(int(k) for k in args.regret_lengths.split(",") if k.strip())
    except ValueError:
        raise InputError(f"--regret-lengths takes comma-separated integers, got {args.regret_lengths!r}") from None
    if not lengths or min(lengths) < 0:
        raise InputError(f"--regret-lengths: each length must be >= 0 (0: the target alone), got {args.regret_lengths!r}")
    options = _generator_options(args)
    report = run_regret(args.model, draft, prompts, max_new_tokens=args.max_new_tokens, drafters=drafters,
                        lengths=lengths, chat=args.chat, json_path=args.json, **options)
    print(format_regret(report))
    if args.json:
        print(f"saved {args.json}")
    return 0


def _contexts(text: str) -> list[int]:
    """--verify-contexts as integers, each at least 16."""
    try:
        contexts = [int(c) for c in text.split(",") if c.strip()]
    except ValueError:
        raise InputError(f"--verify-contexts takes comma-separated integers, got {text!r}") from None
    if any(c < 16 for c in contexts):
        raise InputError(f"--verify-contexts: each context must be at least 16 tokens, got {contexts}")
    return contexts


def run_install(args) -> int:
    from anypair.backends.llama_cpp_guard import install_llama_cpp, llama_cpp_cmake_args

    wheel = install_llama_cpp(progress=not args.quiet)
    flags = " ".join(llama_cpp_cmake_args()) or "native"
    print(f"llama.cpp installed: {wheel.name} ({flags})", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="anypair", description="Lossless speculative decoding with any draft model, whatever its tokenizer.")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    from anypair import __version__

    parser.add_argument("--version", action="version", version=f"anypair {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    from anypair.zoo.cli import add_fetch_parser, add_seed_parser

    add_fetch_parser(sub)
    add_seed_parser(sub)
    from anypair.inspect_pair import add_inspect_parser

    add_inspect_parser(sub)

    i = sub.add_parser("install", help="build and install an optional engine for this CPU (llama.cpp)",
                       description="llama.cpp (llama-cpp-python 0.3.36) built for this CPU: native, except on CPUs "
                                   "with AMX, where ggml's AMX path crashes and is left out; the wheel is kept per "
                                   "set of build flags under $ANYPAIR_HOME/wheels")
    i.add_argument("what", choices=["llama.cpp"])
    i.add_argument("--quiet", action="store_true", help="no progress output")
    i.set_defaults(func=run_install)

    g = sub.add_parser("generate", help="generate text with the target, assisted by the draft")
    g.add_argument("prompt")
    _add_model_args(g, max_new_tokens=None)
    g.add_argument("--raw", action="store_true", help="treat the prompt as raw text to continue (default: a chat message when the target has a chat template)")
    g.add_argument("--no-assisted", action="store_true", help="the target alone, for comparison")
    g.add_argument("--stream", action="store_true")
    g.add_argument("--stop", action="append", help="stop string (repeatable)")
    g.add_argument("--do-sample", action="store_true")
    g.add_argument("--temperature", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=None,
                   help="with --do-sample: the same seed gives the same text, the target's own (as with --no-assisted)")
    g.set_defaults(func=run_generate)

    s = sub.add_parser("serve", help="an OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions)")
    _add_model_args(s)
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    s.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080; 0: any free port)")
    s.add_argument("--queue-size", type=int, default=16,
                   help="requests that may wait while the running ones generate (default 16); one more is "
                        "answered 503")
    s.add_argument("--max-batch", type=int, default=None,
                   help="requests that run at once, sharing each forward of the target (continuous batching: "
                        "each still gets exactly its text alone); default: as many as fit the memory, at most 8; "
                        "1: one at a time")
    s.add_argument("--kv-memory", type=float, default=None, metavar="MIB",
                   help="memory the requests' KV caches may take, in MiB (default: half the memory available): "
                        "sizes --max-batch, and where the requests at the full context would not fit, holds each "
                        "request to the positions that do (a longer one gets a 400 error naming the budget)")
    s.add_argument("--model-name", help="the model id clients send (default: -m as given)")
    s.add_argument("--allow-origin", action="append", default=[],
                   help="a web origin whose pages may call the server (CORS), e.g. http://localhost:3000, or '*'; "
                        "repeatable (default: none)")
    s.add_argument("--accept-unknown-fields", action="store_true",
                   help="ignore request fields the server does not know (a client's own extensions) instead of "
                        "answering 400 naming them, as OpenAI does (default: refuse; a typo such as max_token "
                        "would otherwise change the answer unseen)")
    s.set_defaults(func=run_serve)

    b = sub.add_parser("bench", help="target alone vs assisted, side by side, per example and medians")
    _add_model_args(b)
    b.add_argument("--n", type=int, default=10, help="number of prompts (default: the first 10 HumanEval prompts)")
    b.add_argument("--prompts", help="a text file of prompts separated by two blank lines")
    b.add_argument("--chat", action="store_true", help="send each prompt as a chat message")
    b.add_argument("--drafters", help="comma-separated drafters to run side by side, e.g. model,hybrid,lookup (default: --drafter)")
    b.add_argument("--compare-hf", action="store_true", help="also run transformers' universal assisted generation")
    b.add_argument("--no-llama-cpp", action="store_true",
                   help="skip llama.cpp running the target's GGUF alone (run by default when the target has a GGUF)")
    b.add_argument("--repeats", type=int, default=1)
    b.add_argument("--verify-contexts", default="",
                   help="comma-separated context lengths (e.g. 300,1000,2000,4000) at which to time the target's "
                        "k-token step beside llama.cpp's own k-token decode on the same GGUF")
    b.add_argument("--roofline", action="store_true",
                   help="also measure the machine's read bandwidth and int8 peak and print, per k and context "
                        "(--verify-contexts, default 300), the target's achieved share of each and where its step's ms go")
    b.add_argument("--json", help="save every figure to this JSON file (--sweep: and its table beside it, as .md)")
    b.add_argument("--regret", action="store_true",
                   help="the draft-length policy's regret: per prompt, the shipped policy beside every fixed length "
                        "(--regret-lengths) for each of --drafters, and its speed over the best in hindsight")
    b.add_argument("--regret-lengths", default="0,1,2,3,4,5,6,7,8",
                   help="comma-separated fixed draft lengths for --regret (0: the target alone; default 0..8)")
    sweep = b.add_argument_group("the seed-style sweep (--sweep): prompt length x new tokens x decoding, EOS ignored")
    sweep.add_argument("--sweep", action="store_true",
                       help="per example: prompts of exactly N target tokens cut from CNN/DailyMail articles, each "
                            "number of new tokens, the target alone and anypair, greedy and sampling, llama.cpp alone beside")
    sweep.add_argument("--sweep-prompt-lengths", default="256,512", help="comma-separated prompt lengths in target tokens")
    sweep.add_argument("--sweep-new-tokens", default="64,128,256,512,1024", help="comma-separated numbers of new tokens")
    sweep.add_argument("--sweep-temperatures", default="0,1.0", help="comma-separated; 0 = greedy")
    sweep.add_argument("--sweep-examples", type=int, default=1, help="articles per prompt length")
    sweep.add_argument("--sweep-articles",
                       help="JSONL with an \"article\" per line (default: the 6 CNN/DailyMail articles shipped "
                            "with anypair)")
    seed = b.add_argument_group(
        "a big target's cost on a seed-shaped file (--target-shape): RANDOM weights with the model's exact shapes, "
        "the gguf engine beside llama.cpp; the text is meaningless, the costs are real")
    seed.add_argument("--target-shape", metavar="NAME",
                      help="a seed shape (`anypair seed-gguf --list`): write or reuse its file, then measure load time, "
                           "peak RSS, k-token steps at --verify-contexts (default 300,4000) and prefill on both engines")
    seed.add_argument("--replay", action="store_true",
                      help="with --target-shape: the real default pair's rounds on --n HumanEval prompts (or "
                           "--prompts), recorded, then replayed on that file (same rows, same contexts), beside "
                           "the seed target alone and llama.cpp alone on it: acceptance borrowed, every cost measured; "
                           "--drafter picks the drafter recorded (hybrid: the draft model and the prompt's n-grams)")
    seed.add_argument("--replay-lengths", default="policy",
                      help="with --replay: whose rounds are replayed, comma-separated: 'policy' (the shipped policy's, "
                           "pricing rounds at the seed target's measured costs; default), 'policy-1.5b' (priced beside "
                           "the 1.5B target) and/or constant draft lengths (e.g. policy,4,8: what longer drafts would "
                           "give where a draft step is cheap)")
    seed.add_argument("--ks", default="1-16", help="the ks timed (default 1-16; e.g. 1,2,4,8,16)")
    seed.add_argument("--step-repeats", type=int, default=5, help="timed calls per k and context (median; default 5)")
    seed.add_argument("--load-repeats", type=int, default=2, help="loads per engine, each in a child process (default 2)")
    seed.add_argument("--prefill-tokens", type=int, default=1000, help="prompt tokens read in the prefill timing (0: none)")
    seed.add_argument("--plot", help="save a plot to this path (.png): with --target-shape ms by k for both engines, "
                                     "with --prefill time to first token against prompt length")
    prefill = b.add_argument_group(
        "time to first token on long prompts (--prefill): the gguf engine reading a real text (QMSum meeting "
        "transcripts, or the packaged CNN/DailyMail articles) from an empty cache, beside llama.cpp alone on the "
        "same GGUF and, where given, OpenVINO GenAI; the draft's read of its window of the same text too")
    prefill.add_argument("--prefill", metavar="LENGTHS",
                         help="comma-separated prompt lengths in target tokens, e.g. 1024,4096,8192,16384 (--repeats "
                              "times each, engines alternating, medians; --json, --plot; --no-llama-cpp; --drafter "
                              "lookup leaves the draft's read out)")
    prefill.add_argument("--openvino-python", metavar="PATH",
                         help="with --prefill: the python of a virtual environment with openvino-genai installed "
                              "(e.g. openvino==2026.4.1 openvino-genai==2026.4.1.0 openvino-tokenizers==2026.4.1.0): "
                              "OpenVINO GenAI reads the same prompts from the same GGUF in a process of its own, same "
                              "threads, its prefix cache off; where it fails, one line says so and the bench goes on")
    b.set_defaults(func=run_bench_cmd)
    return parser


def _one_line(exc: BaseException) -> str:
    # messages quoting a library's error may carry its newlines; an error is one line
    return " ".join(str(exc).split())


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--debug" in argv:  # accepted anywhere on the line, not only before the subcommand
        argv = ["--debug", *(a for a in argv if a != "--debug")]
    args = parser.parse_args(argv)
    try:
        return args.func(args) or 0
    except AnyPairError as exc:
        if args.debug:
            raise
        print(f"anypair: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("anypair: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug, not bad input: still one line, the traceback on request
        if args.debug:
            raise
        print(f"anypair: internal error: {type(exc).__name__}: {_one_line(exc)} "
              "(run again with --debug for the traceback, and please report it)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
