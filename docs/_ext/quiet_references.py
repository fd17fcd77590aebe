"""References to Python objects that exist but have no page of their own in this manual (a
private helper named in a docstring, numpy's or scikit-learn's classes: the build has no
network for intersphinx) are rendered as code instead of failing the nitpicky build. A
reference to a name that cannot be imported stays a warning, with its page and line, so that
a renamed or removed object breaks the build.
"""

from __future__ import annotations

import importlib
import re

from docutils import nodes
from sphinx.application import Sphinx

_ROLES = {"func", "meth", "class", "mod", "data", "attr", "obj", "exc", "const", "property"}


def importable(target: str) -> bool:
    """Whether ``target`` (``pkg.module.Name.attr``) names an object that exists."""
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        except Exception:  # a module that fails for another reason is not a missing name
            return False
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                annotations = getattr(obj, "__dataclass_fields__", {})
                if attr in annotations:  # a dataclass field without a class default
                    obj = annotations[attr]
                    continue
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _missing(app: Sphinx, env, node, contnode):
    if node.get("refdomain") != "py" or node.get("reftype") not in _ROLES:
        return None
    target = node.get("reftarget", "")
    candidates = [target]
    module, cls = node.get("py:module"), node.get("py:class")
    if module:
        if cls:
            candidates.append(f"{module}.{cls}.{target}")
        candidates.append(f"{module}.{target}")
    # the docstring's own object: a relative name is looked up from its module and class
    source = re.search(r"docstring of ([\w.]+)", node.source or "")
    if source:
        parts = source.group(1).split(".")
        for cut in range(len(parts), 0, -1):
            candidates.append(".".join([*parts[:cut], target]))
    for name in candidates:
        if importable(name):
            return nodes.literal(text=contnode.astext(), classes=["xref", "py"])
    return None


def setup(app: Sphinx) -> dict:
    app.connect("missing-reference", _missing, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
