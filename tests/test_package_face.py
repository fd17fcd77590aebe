"""The package's face: its version on the command line, a plain-text help, the licence, the
citation and the changelog agree with the package."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

import ia_stages
from ia_stages.pipeline.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def test_version_on_the_command_line_is_the_package_version():
    done = subprocess.run(
        [sys.executable, "-m", "ia_stages.pipeline.cli", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == f"ia-stages {ia_stages.__version__}"


def test_help_is_plain_text_in_whole_sentences():
    text = build_parser().format_help()
    assert "``" not in text and ":func:" not in text and ":mod:" not in text
    description = build_parser().description
    assert description.endswith(".") and "ia-stages cluster my_images/ --out" in description
    assert "COMMAND" in text.splitlines()[0]  # not the 23 stage names in the usage line
    for action in build_parser()._subparsers._group_actions[0].choices.values():
        assert "``" not in action.format_help()


def test_licence_and_citation_match_the_package():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    licence = (ROOT / "LICENSE").read_text()
    assert project["license"] == "MIT" and licence.startswith("MIT License")
    assert "Copyright (c) the ia-stages developers" in licence
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["version"] == ia_stages.__version__
    assert cff["license"] == "MIT"
    paper = cff["preferred-citation"]
    assert paper["title"] == "Invariant Attention: Provable Clustering under Transformations"
    assert paper["authors"] and paper["type"] == "article"


def test_changelog_has_the_current_version_and_an_unreleased_section():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "Keep a Changelog" in text
    assert "## Unreleased" in text
    assert f"## {ia_stages.__version__} - " in text
