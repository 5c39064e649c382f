import os

import pytest

os.environ.setdefault("OPTIMUS_EGG_STRICT", "1")  # a fallback inside a test is a failure


@pytest.fixture
def lenient(monkeypatch):
    """Let the optimizer fall back (for the tests of falling back)."""
    monkeypatch.setenv("OPTIMUS_EGG_STRICT", "0")
