"""One logger, ``optimus_egg``: one WARNING per fallback, per-graph statistics with OPTIMUS_EGG_DEBUG."""

import ast
import logging
import warnings
from pathlib import Path

import pytest
import torch

from optimus_egg import logger, optimize
from tests.helpers import Fn

ROOT = Path(__file__).resolve().parents[1]
MODEL = Fn(lambda x: torch.cat([torch.relu(p) for p in torch.split(x, 2, 1)], 1))
X = torch.randn(3, 8)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def fresh_logger(monkeypatch):
    """The package logger as an application finds it; restored afterwards."""
    handlers, level = list(logger.log.handlers), logger.log.level
    monkeypatch.setattr(logger, "_stderr", None)
    monkeypatch.delenv("OPTIMUS_EGG_DEBUG", raising=False)
    yield logger.log
    logger.log.handlers[:] = handlers
    logger.log.setLevel(level)


@pytest.fixture
def records(fresh_logger):
    handler = _Records()
    fresh_logger.addHandler(handler)
    return handler.records


def test_fallback_logs_one_warning_with_the_cause(lenient, monkeypatch, records):
    import optimus_egg.pipeline as pipeline

    monkeypatch.setattr(pipeline, "translate", lambda gm: (_ for _ in ()).throw(ValueError("injected")))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, report = optimize(MODEL, (X,))
    warned = [r for r in records if r.levelno >= logging.WARNING]
    assert len(warned) == 1 and warned[0].name == "optimus_egg"
    assert "ValueError: injected" in warned[0].getMessage() and report.fallback


def test_debug_switch_logs_each_graphs_statistics(monkeypatch, records):
    monkeypatch.setenv("OPTIMUS_EGG_DEBUG", "1")
    _, report = optimize(MODEL, (X,))
    debug = [r.getMessage() for r in records if r.levelno == logging.DEBUG]
    assert len(debug) == 1
    assert debug[0].startswith(report.summary().removeprefix("optimus_egg: ")) and report.timings() in debug[0]
    assert all(phase in debug[0] for phase in ("translate", "build", "saturate", "extract", "emit"))


def test_no_debug_records_without_the_switch(records):
    optimize(MODEL, (X,))
    assert records == []


def test_debug_reaches_stderr_when_logging_is_not_configured(monkeypatch, fresh_logger, capsys):
    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # an application that never set up logging
    monkeypatch.setenv("OPTIMUS_EGG_DEBUG", "1")
    _, report = optimize(MODEL, (X,))
    err = capsys.readouterr().err
    assert report.summary() in err and "optimus_egg: optimus_egg:" not in err


def test_silent_by_default(lenient, monkeypatch, fresh_logger, capsys):
    """Without the switch and without logging configured, a fallback shows only as its warning."""
    import optimus_egg.pipeline as pipeline

    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    monkeypatch.setattr(pipeline, "translate", lambda gm: (_ for _ in ()).throw(ValueError("injected")))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        optimize(MODEL, (X,))
    assert len(caught) == 1 and capsys.readouterr().err == ""


def test_library_code_logs_instead_of_printing():
    """Commands (cli, explain, bench scripts) print; the library logs to the one logger."""
    library = [*(ROOT / "optimus_egg").glob("*.py"), *(ROOT / "rewrites").glob("*.py"),
               *(ROOT / "extract").glob("*.py")]
    commands = {"cli.py", "explain.py", "discover.py"}
    for path in library:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name == "print":
                assert path.name in commands, f"{path.name}:{node.lineno} prints"
            if name == "getLogger":
                assert ast.literal_eval(node.args[0]) == "optimus_egg", f"{path.name}:{node.lineno}"
