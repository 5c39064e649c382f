import os

import pytest

os.environ.setdefault("OPTIMUS_EGG_STRICT", "1")  # a fallback inside a test is a failure


@pytest.fixture
def lenient(monkeypatch):
    """Let the optimizer fall back (for the tests of falling back)."""
    monkeypatch.setenv("OPTIMUS_EGG_STRICT", "0")


def pytest_addoption(parser):
    parser.addoption("--fuzz-examples", type=int, default=int(os.environ.get("OPTIMUS_EGG_FUZZ_EXAMPLES", 500)),
                     help="programs the fuzzer (tests/fuzz) checks, over all flavours (default 500)")
    parser.addoption("--fuzz-seed", type=int, default=None,
                     help="draw the fuzzer's programs from this seed instead of the reproducible default")


@pytest.fixture
def fuzz_examples(request):
    return request.config.getoption("--fuzz-examples")


@pytest.fixture
def fuzz_seed(request):
    return request.config.getoption("--fuzz-seed")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test starts from a fresh Dynamo. Tests share ``Fn.forward``'s code object, and a
    second compile of it with other shapes is traced with symbolic sizes (automatic dynamic
    shapes): tests/bench/test_backends.py failed after any test of tests/test_pipeline.py."""
    import torch

    torch._dynamo.reset()
