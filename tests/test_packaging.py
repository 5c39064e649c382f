"""Installed layout: the backend entry point, and no top-level rewrites/extract modules."""

import importlib.metadata
import importlib.util

import torch


def test_backend_entry_point_is_registered():
    eps = importlib.metadata.entry_points(group="torch_dynamo_backends")
    assert any(ep.name == "optimus_egg" and ep.value == "optimus_egg.backend:optimus_egg_backend" for ep in eps)
    assert "optimus_egg" in torch._dynamo.list_backends(exclude_tags=())


def test_rule_and_extract_packages_live_inside_optimus_egg():
    import optimus_egg.extract
    import optimus_egg.rewrites

    assert importlib.util.find_spec("rewrites") is None or "site-packages" not in str(
        importlib.util.find_spec("rewrites").origin)
    assert importlib.util.find_spec("extract") is None or "site-packages" not in str(
        importlib.util.find_spec("extract").origin)
    assert optimus_egg.rewrites.family("split_cat").rules
