"""The optimizer's options on the command line: named flags and a generic KEY=VALUE pass-through."""

import argparse

import pytest

from optimus_egg.cli_options import add_option_args, options_from_args


def _parse(*argv):
    parser = argparse.ArgumentParser()
    add_option_args(parser)
    return options_from_args(parser.parse_args(list(argv)))


def test_nothing_given_is_no_options():
    assert _parse() == {}


def test_named_flags():
    got = _parse("--families", "split_cat", "--max-iterations", "5", "--max-enodes", "1000",
                 "--max-seconds", "2.5", "--strict")
    assert got == {"families": ["split_cat"], "max_iterations": 5, "max_enodes": 1000,
                   "max_seconds": 2.5, "strict": True}


def test_generic_option_reads_python_literals():
    got = _parse("--option", "max_iterations=3", "--option", "families=['pointwise']",
                 "--option", "max-seconds=0.5")
    assert got == {"max_iterations": 3, "families": ["pointwise"], "max_seconds": 0.5}


def test_generic_option_passes_through_to_the_pipeline(monkeypatch):
    """An option the pipeline accepts, that this module has no flag for, reaches it unchanged."""
    from optimus_egg import options

    seen = {}
    real = options.Options.from_kwargs.__func__

    def spy(cls, **kw):
        seen.update(kw)
        kw.pop("future_option", None)
        return real(cls, **kw)

    monkeypatch.setattr(options.Options, "from_kwargs", classmethod(spy))
    assert _parse("--option", "future_option=fast") == {"future_option": "fast"}
    assert seen == {"future_option": "fast"}


@pytest.mark.parametrize("argv, match", [
    (["--option", "nope=1"], "valid"),
    (["--families", "nope"], "built-in families"),
    (["--option", "no-equals-sign"], "KEY=VALUE"),
    (["--max-iterations", "3", "--option", "max_iterations=4"], "twice"),
])
def test_bad_options_are_clear_errors(argv, match):
    with pytest.raises(ValueError, match=match):
        _parse(*argv)


@pytest.mark.parametrize("argv", [["bench", "--quick", "--reps", "0"], ["bench", "--threads", "-1"]])
def test_counts_on_the_command_line_are_positive(capsys, argv):
    """``bench --reps 0`` ran the default 10 rounds, as if no count had been given."""
    from optimus_egg.cli import main

    with pytest.raises(SystemExit):
        main(argv)
    assert "positive integer" in capsys.readouterr().err
