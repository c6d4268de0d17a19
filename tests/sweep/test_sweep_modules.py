"""The sweep package's docstring names its modules as they are."""

from __future__ import annotations

import pkgutil
import re

import minimind.sweep


def test_the_package_docstring_names_every_module_and_only_modules() -> None:
    doc = minimind.sweep.__doc__ or ""
    listed = doc[doc.index("Modules, in the order") :]
    named = set(re.findall(r"`(\w+)`", listed))
    modules = {m.name for m in pkgutil.iter_modules(minimind.sweep.__path__)}
    assert named == modules
