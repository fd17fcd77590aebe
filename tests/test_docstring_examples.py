"""Every docstring Example in the package runs and prints what it shows (those that need data
a reader has are marked ``+SKIP``): an example that no longer matches the code fails here."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import ia_stages

MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(ia_stages.__path__, "ia_stages.")
    if ".workflow" not in m.name
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run_as_shown(name):
    module = importlib.import_module(name)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(module, optionflags=flags, verbose=False, report=False)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples fail"
