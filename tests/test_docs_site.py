"""The manual opens and renders in a browser: headless Chromium loads the index page, the
estimator's API page and a gallery example over HTTP on the loopback address, and a page of
script in the same origin reports what each rendered (its title, its headings, every image
decoded with a width). Screenshots of the three pages are written for a person to look at.

The site is the one ``IA_STAGES_DOCS_HTML`` names (CI builds it first), or, with the ``docs``
extra installed, one built here with a single gallery example executed. Without Chromium or
Sphinx the test skips with its reason.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = "plot_kappa_max_alignment"
PAGES = {
    "index": "index.html",
    "estimator": "api/generated/ia_stages.InvariantAttentionClustering.html",
    "example": f"auto_examples/{EXAMPLE}.html",
}
HEIGHTS = {"example": 2600}  # tall enough to show the example's first figure
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]

# loads every page in an iframe of the same origin and writes what rendered into #result
HARNESS = """<!doctype html><html><body><pre id="result">pending</pre><script>
const pages = %s;
async function inspect(name, url) {
  const frame = document.createElement("iframe");
  frame.width = 1280; frame.height = 1600;
  document.body.appendChild(frame);
  await new Promise((ok) => { frame.onload = ok; frame.src = url; });
  const doc = frame.contentDocument;
  const images = [...doc.images].map((img) => ({src: img.getAttribute("src"),
    complete: img.complete, width: img.naturalWidth}));
  await Promise.all([...doc.images].map((img) => img.decode().catch(() => null)));
  return {name, title: doc.title,
    h1: [...doc.querySelectorAll("h1")].map((h) => h.textContent.replace(/#$/, "").trim()),
    text: doc.body.innerText.length, images,
    decoded: [...doc.images].map((img) => img.naturalWidth),
    signature: [...doc.querySelectorAll("dt.sig")].map((d) => d.textContent.trim()).slice(0, 3),
    figures: doc.querySelectorAll("img.sphx-glr-single-img, img.sphx-glr-multi-img").length};
}
(async () => {
  const out = [];
  for (const [name, url] of Object.entries(pages)) out.push(await inspect(name, url));
  document.getElementById("result").textContent = JSON.stringify(out);
})();
</script></body></html>
"""


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The built HTML site: ``IA_STAGES_DOCS_HTML``, or built here."""
    given = os.environ.get("IA_STAGES_DOCS_HTML")
    if given:
        path = Path(given)
        if not (path / "index.html").is_file():
            pytest.fail(f"IA_STAGES_DOCS_HTML={given}: no index.html there")
        return path
    try:
        import sphinx  # noqa: F401
        import sphinx_gallery  # noqa: F401
    except ImportError:
        pytest.skip("Sphinx is not installed: pip install -e '.[docs]' to build the manual")
    out = tmp_path_factory.mktemp("docs") / "html"
    env = dict(os.environ, IA_STAGES_DOCS_EXAMPLES=EXAMPLE)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-q", str(ROOT / "docs"), str(out),
           "-d", str(out.parent / "doctrees")]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def served(site, tmp_path_factory):
    """The site and a harness page, served over HTTP on 127.0.0.1."""
    root = tmp_path_factory.mktemp("served")
    (root / "site").symlink_to(site.resolve(), target_is_directory=True)
    pages = {name: f"site/{page}" for name, page in PAGES.items()}
    (root / "check.html").write_text(HARNESS % json.dumps(pages))
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(root))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _run(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [browser, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_index_estimator_page_and_example_render_in_chromium(served, site, tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium)")
    done = _run(browser, tmp_path / "profile", "--virtual-time-budget=20000", "--dump-dom",
                f"{served}/check.html")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    start = done.stdout.index('<pre id="result">') + len('<pre id="result">')
    report = {p["name"]: p for p in json.loads(done.stdout[start : done.stdout.index("</pre>")])}

    index = report["index"]
    assert index["title"].startswith("ia-stages"), index
    assert index["h1"] == ["ia-stages"] and index["text"] > 500
    assert all(width > 0 for width in index["decoded"]), index["images"]  # the gallery picture

    est = report["estimator"]
    assert est["h1"] == ["InvariantAttentionClustering"], est
    assert est["signature"] and "InvariantAttentionClustering" in est["signature"][0]
    assert est["text"] > 3000  # parameters, attributes, examples, methods

    example = report["example"]
    assert example["figures"] >= 2, example  # the alignment and the invariance plot
    assert all(width > 0 for width in example["decoded"]), example["images"]
    figure = next(i["src"] for i in example["images"] if "sphx_glr_" + EXAMPLE in i["src"])
    png = Image.open((site / "auto_examples" / figure).resolve())
    assert png.size[0] > 300 and np.asarray(png.convert("L")).std() > 10  # not blank

    shots = Path(os.environ.get("IA_STAGES_DOCS_SHOTS", tmp_path / "shots"))
    shots.mkdir(parents=True, exist_ok=True)
    for name, page in PAGES.items():
        shot = shots / f"{name}.png"
        height = HEIGHTS.get(name, 1600)
        done = _run(browser, tmp_path / f"profile-{name}", f"--window-size=1280,{height}",
                    "--virtual-time-budget=10000", f"--screenshot={shot}",
                    f"{served}/site/{page}")  # fmt: skip
        assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
        pixels = np.asarray(Image.open(shot).convert("L"), dtype=float)
        assert pixels.shape == (height, 1280) and pixels.std() > 5, name  # a page, not a blank
