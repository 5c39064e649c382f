"""Optimizer options on the command line, shared by every ``optimus-egg`` command that optimizes.

The named flags cover the options every user reaches for; ``--option KEY=VALUE`` passes any
other option of :class:`optimus_egg.options.Options` through unchanged, so options added to the
pipeline later work from the command line without touching this module.
"""

from __future__ import annotations

import argparse
import ast
from typing import Any

from optimus_egg.options import Options

#: Named flags: argparse destination -> option name.
_FLAGS = {"families": "families", "max_iterations": "max_iterations", "max_enodes": "max_enodes",
          "max_seconds": "max_seconds", "strict": "strict"}


def positive_int(text: str) -> int:
    """argparse type for counts, refused before any work: 0 repeats would make ``tune`` fail
    after the timing (``min()`` of nothing), and ``bench --reps 0`` run its default rounds."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"want a positive integer, got {text!r}")
    return int(text)


def add_option_args(parser: argparse.ArgumentParser) -> None:
    """Add the optimizer's options to ``parser`` (read them back with :func:`options_from_args`)."""
    group = parser.add_argument_group("optimizer options (default: the documented defaults)")
    group.add_argument("--families", nargs="+", metavar="FAMILY",
                       help="rule families: built-in names, or your own rule module by import path "
                            "or .py file (default: all built-in)")
    group.add_argument("--max-iterations", type=int, metavar="N", help="saturation iteration budget")
    group.add_argument("--max-enodes", type=int, metavar="N", help="e-graph size budget")
    group.add_argument("--max-seconds", type=float, metavar="S",
                       help="search time budget (the seed stage and saturation)")
    group.add_argument("--strict", action="store_true", default=None,
                       help="raise instead of falling back to the unoptimized graph")
    group.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                       help="any other option, VALUE read as a Python literal when it is one "
                            "(--option max_seconds=2.5, --option families=\"['split_cat']\"); repeatable")


def options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The options given on the command line, as ``optimize``/``torch.compile`` take them.

    Only options that were given appear. Raises ``ValueError`` for a malformed ``--option``, an
    option given twice, and (through :meth:`Options.from_kwargs`) unknown options or families.
    """
    options = {name: getattr(args, dest) for dest, name in _FLAGS.items()
               if getattr(args, dest, None) is not None}
    for item in getattr(args, "option", None) or []:
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ValueError(f"--option wants KEY=VALUE, got {item!r}")
        if key in options:
            raise ValueError(f"option {key!r} given twice")
        options[key] = _literal(text)
    try:
        Options.from_kwargs(**options)
    except TypeError as exc:  # unknown option names: report them like every other bad value
        raise ValueError(str(exc)) from None
    return options


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
