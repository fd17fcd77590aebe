"""Sphinx configuration of the ia-stages manual.

Build it from the repository root, warnings as errors:

    sphinx-build -W --keep-going -b html docs docs/_build/html

A broken cross-reference, a public name of the API without a numpydoc docstring (or without
its Examples section, a parameter's type or default), a malformed docstring or a failing
gallery example stops the build with the page or source file and its line.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(DOCS / "_ext"))

import ia_stages  # noqa: E402

project = "ia-stages"
author = "the ia-stages developers"
copyright = "the ia-stages developers"
release = ia_stages.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
    # ours (docs/_ext): generated from the sources, so that they cannot drift
    "config_reference",
    "bench_tables",
    "api_checks",
    "quiet_references",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**/sg_execution_times.rst", "auto_examples/*.ipynb"]
templates_path = ["_templates"]

# every reference must resolve (docs/_ext/quiet_references.py renders references to real but
# undocumented Python objects as code; a name that does not exist stays an error)
nitpicky = True
default_role = "code"

myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {"members": False}
autodoc_typehints = "none"  # the numpydoc Parameters sections hold the types
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_use_plots = False

sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    # IA_STAGES_DOCS_EXAMPLES (a regex of script names) runs only those; the others' pages
    # show their code without output (the site test builds with one)
    "filename_pattern": rf"/({os.environ['IA_STAGES_DOCS_EXAMPLES']})\.py$"
    if os.environ.get("IA_STAGES_DOCS_EXAMPLES")
    else r"/plot_",
    # "Examples using X" on every API page
    "backreferences_dir": "api/generated/backreferences",
    "doc_module": ("ia_stages",),
    "reference_url": {"ia_stages": None},
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "matplotlib_animations": False,
    "image_scrapers": ("matplotlib",),
    "reset_modules": ("matplotlib",),
    "show_memory": False,
    "min_reported_time": 1,
    # a failing example stops the build, naming the script and the line of its traceback
    "abort_on_example_error": False,
    "only_warn_on_example_error": False,
}

html_theme = "pydata_sphinx_theme"
html_title = f"ia-stages {release}"
html_static_path = ["_static"]
html_show_sourcelink = False
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
    "secondary_sidebar_items": ["page-toc"],
}
html_context = {"default_mode": "light"}

# the public API whose docstrings docs/_ext/api_checks.py checks (numpydoc, types, defaults,
# Examples): these modules' __all__, and module:name entries
api_public = [
    "ia_stages",
    "ia_stages.kmax",
    "ia_stages.core.groups:make_group",
    "ia_stages.data.user_images:load_images,probe,read_label_csv,manifest,fit_canvas",
    "ia_stages.data.loaders:read_idx,load_mnist_idx,load_affnist_mat,LoaderError",
    "ia_stages.data.datasets:mnist,affnist",
]
html_css_files = ["custom.css"]
smartquotes = False  # "--cores" stays two hyphens in generated tables and prose
