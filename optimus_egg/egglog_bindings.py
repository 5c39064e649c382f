"""egglog's compiled bindings, loaded without egglog's high-level Python API.

Only :mod:`optimus_egg.egraph` uses them (``from optimus_egg.egglog_bindings import bindings``).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any


def _load_bindings() -> ModuleType:
    """egglog's compiled bindings, without running ``egglog/__init__.py``.

    The package's ``__init__`` imports egglog's high-level API (and black, for pretty-printing),
    which costs a process's first compile far more than the extension alone, for modules the
    engine never uses. So the extension next to that ``__init__`` is loaded by hand, and a
    later ``import egglog`` is handed that same module (:class:`_Loaded`): egglog 14's extension
    panics when it is initialized twice in one process (``SetLoggerError``), and the package's
    ``bindings`` attribute is set only by a real load. Another layout or loader falls back to the
    plain import.
    """
    if "egglog" not in sys.modules and "egglog.bindings" not in sys.modules:
        try:
            package = importlib.util.find_spec("egglog")
            spec = importlib.machinery.PathFinder.find_spec("egglog.bindings", package.submodule_search_locations)
            if isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                sys.meta_path.insert(0, _Loaded(module))
                return module
        except Exception:  # noqa: BLE001 - any surprise: the plain import below
            pass
        finally:
            sys.modules.pop("egglog.bindings", None)  # CPython registers single-phase extensions
    from egglog import bindings

    return bindings


class _Loaded(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``egglog.bindings`` once, as the module already loaded: the import system then runs
    no module initialization again and sets it on the package as a load of its own would."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "egglog.bindings":
            return None
        sys.meta_path.remove(self)
        return importlib.util.spec_from_loader(name, self, origin=self.module.__spec__.origin)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self.module

    def exec_module(self, module: ModuleType) -> None:
        """Initialized when it was loaded."""


bindings = _load_bindings()
