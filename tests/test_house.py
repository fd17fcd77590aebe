"""The package's layout: every module imports on its own, no import cycle, and imports point
downwards only (pipeline -> benchmark -> ia -> readout -> kmax -> data -> core -> settings)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import ia_stages

PACKAGE = Path(ia_stages.__file__).parent
LAYERS = ("settings", "core", "data", "kmax", "readout", "ia", "benchmark", "pipeline")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: Path, everywhere: bool) -> set[str]:
    """ia_stages modules that ``name`` imports (module level only unless ``everywhere``)."""
    tree = ast.parse(path.read_text())
    nodes = ast.walk(tree) if everywhere else tree.body
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ia_stages"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("ia_stages"))
    return found & set(_modules()) - {name}


def _layer(name: str) -> int | None:
    parts = name.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_top_level_holds_the_layers_and_the_package_init_only() -> None:
    entries = [p.name for p in PACKAGE.iterdir() if p.name != "__pycache__"]
    assert sorted(entries) == sorted([*LAYERS, "__init__.py"]), entries
    assert set(LAYERS) <= set(entries)


def test_imports_point_downwards_only() -> None:
    wrong = []
    for name, path in _modules().items():
        mine = _layer(name)
        for other in _imports(name, path, everywhere=True):
            theirs = _layer(other)
            if mine is not None and theirs is not None and theirs > mine:
                wrong.append(f"{name} -> {other}")
    assert not wrong, wrong


def test_no_import_cycle() -> None:
    graph = {name: _imports(name, path, everywhere=True) for name, path in _modules().items()}
    # importing a.b.c runs the package a.b's __init__ first: that is no cycle of a.b.c's making
    graph = {k: {m for m in v if not k.startswith(m + ".")} for k, v in graph.items()}
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*stack, node, nxt]))
            if nxt not in state:
                visit(nxt, [*stack, node])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])


@pytest.mark.slow
def test_every_module_imports_on_its_own() -> None:
    """Each module imported into an interpreter holding no other ia_stages module."""
    code = (
        "import importlib, json, sys\n"
        "import numpy, numba, scipy, sklearn, xarray, zarr, pandas\n"
        "failed = {}\n"
        f"for name in {sorted(_modules())!r}:\n"
        "    for m in [m for m in sys.modules if m.startswith('ia_stages')]:\n"
        "        del sys.modules[m]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as err:\n"
        "        failed[name] = repr(err)\n"
        "print(json.dumps(failed))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {}


def test_the_command_and_the_public_names_load_no_more_than_they_need() -> None:
    """Every pipeline job starts ``ia-stages``: it must not load scikit-learn (and through it
    scipy.stats) until a stage uses it, nor the config's validator (jobs get their settings as
    JSON); the public names import on first use."""
    code = (
        "import sys\n"
        "import ia_stages, ia_stages.pipeline.cli\n"
        "heavy = [m for m in ('sklearn', 'scipy.stats', 'ia_stages.ia.estimator', 'jsonschema') "
        "if m in sys.modules]\n"
        "from ia_stages import InvariantAttentionClustering, kappa_max, SE2\n"
        "print(heavy, sorted(ia_stages.__all__) == sorted(dir(ia_stages)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] True"


@pytest.mark.parametrize(
    ("stage", "not_loaded"),
    [
        # a gather only stacks stores: numba's kernels are for the one-job path
        ("kmax_gather", ("numba", "ia_stages.kmax", "sklearn")),
        # these use the numpy-only metrics; the tables need scikit-learn for NMI/ARI only
        ("theory", ("sklearn", "scipy.optimize")),
        ("bench_tables", ("sklearn", "scipy.optimize", "numba")),
        ("figures", ("numba", "sklearn")),
    ],
)
def test_a_stage_module_loads_only_what_its_jobs_use(stage: str, not_loaded: tuple) -> None:
    """Each pipeline job is a fresh process: every module a stage imports up front costs each
    of its jobs start-up time; what only some of its paths use is imported there."""
    code = (
        f"import sys, ia_stages.pipeline.stages.{stage}\n"
        f"print([m for m in {not_loaded!r} if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
