"""The documented module paths of Chorus 1.0 that 1.1 moved into the one ``chorus`` namespace.

``chorus_contracts`` (whose ``base``, ``envelope``, ``lifecycle``, ``approvals`` and
``platform`` modules are public) is ``chorus.contracts`` since 1.1. Code written against 1.0
keeps importing it until 2.0: importing ``chorus`` puts a finder on ``sys.meta_path`` that
answers the old name with the very module of the new one (so classes and registries are
shared, never copied) and says, once per module, that the path is deprecated. No package of
the old name is installed: nothing but ``chorus`` sits at the top of site-packages.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

RENAMED = {"chorus_contracts": "chorus.contracts"}
"""Old top-level package -> where it is now."""


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module of its new one."""

    def __init__(self, new: str) -> None:
        self.new = new
        self.spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name} is {self.new} since Chorus 1.1 (the old path goes in 2.0): import {self.new}",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(self.new)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The new module ran already when it was imported. The import system has just set
        its ``__spec__`` to the old name's: the real one goes back (reloads and
        importlib.resources read it)."""
        module.__spec__ = self.spec


class RenamedFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        head, _, rest = fullname.partition(".")
        if head not in RENAMED:
            return None
        new = RENAMED[head] + (f".{rest}" if rest else "")
        if importlib.util.find_spec(new) is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(new))


def install() -> None:
    """Answer the old names from now on (idempotent)."""
    if not any(isinstance(finder, RenamedFinder) for finder in sys.meta_path):
        # First: the path finder would otherwise load an old submodule a second time, from
        # the new package's folder (the alias of the old package has its __path__).
        sys.meta_path.insert(0, RenamedFinder())
