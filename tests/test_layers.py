"""Imports point one way: tools → backend / pipeline → emit / extract / egraph → rewrites → op
table → IR. A module may import its own layer and the layers below it, never one above."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"optimus_egg": "", "rewrites": "rewrites.", "extract": "extract.", "bench": "bench."}

#: Lowest first. A name ending in ``.`` is every module of that subpackage.
LAYERS = [
    {"ir", "logger"},
    {"optable"},
    {"nodes", "effects", "structural", "calls", "aten", "lowered"},
    {"rewrites", "rewrites."},
    {"egglog_bindings", "egraph", "frontend", "draws", "fake_values", "emit", "cleanup", "outputs", "bounds",
     "extract", "extract."},
    {"options", "report", "guards", "modes", "cache", "verify", "post_grad", "pipeline", "backend"},
    {"counting", "cli", "cli_options", "explain", "tune", "discover", "discover_programs", "bench", "bench."},
]
#: The emitter's side of the e-graph layer, which extraction never reads.
EMITTER = {"emit", "cleanup", "outputs", "bounds"}


def _layer(module: str) -> int:
    for i, names in enumerate(LAYERS):
        if module in names or any(n.endswith(".") and module.startswith(n) for n in names):
            return i
    raise AssertionError(f"{module} has no layer in tests/test_layers.py")


def _modules() -> dict[str, Path]:
    found = {}
    for folder, prefix in FOLDERS.items():
        for path in (ROOT / folder).glob("*.py"):
            found[prefix.rstrip(".") if path.stem == "__init__" else prefix + path.stem] = path
    found.pop("", None)  # optimus_egg/__init__.py re-exports the pipeline's API
    return found


def _imports(path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``path`` imports, at module level or inside functions."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("optimus_egg"):
            base = node.module.removeprefix("optimus_egg").lstrip(".")
            names = [f"{base}.{a.name}".lstrip(".") for a in node.names] + [base]
        elif isinstance(node, ast.Import):
            names = [a.name.removeprefix("optimus_egg").lstrip(".") for a in node.names
                     if a.name.startswith("optimus_egg")]
        out |= {n for n in names if n in known}
    return out


MODULES = _modules()


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module):
    mine = _layer(module)
    upward = sorted(m for m in _imports(MODULES[module], set(MODULES)) if _layer(m) > mine)
    assert not upward, f"{module} (layer {mine}) imports a higher layer: {upward}"


def test_extraction_never_reads_the_emitter_pipeline_or_bench():
    for module, path in MODULES.items():
        if module == "extract" or module.startswith("extract."):
            bad = {m for m in _imports(path, set(MODULES)) if m in EMITTER or _layer(m) > _layer("extract")}
            assert not bad, f"{module} imports {sorted(bad)}"


def test_the_layer_check_sees_an_upward_import(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text("def f():\n    from optimus_egg.pipeline import optimize\n")
    assert _imports(path, set(MODULES)) == {"pipeline"}
