"""The search kernel compiled in a background process (ia_stages.kmax.compile_ahead): it must
fill numba's cache with the very build the kNN path's sample search loads, and a failed or
abandoned background process must leave the job to compile as before."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from dataclasses import asdict

import pytest

from ia_stages.core.groups import SE2
from ia_stages.ia.distances import knn_sample_search
from ia_stages.kmax import SearchSettings
from ia_stages.kmax.compile_ahead import search_compiled_ahead, wait_for
from ia_stages.settings import Settings

# the kNN path's own sample search, as the pipeline's knn jobs and the estimator run it
SAMPLE_SEARCH = asdict(knn_sample_search(Settings()))

START = """
import json, sys
from ia_stages.core.groups import SE2
from ia_stages.kmax import SearchSettings
from ia_stages.kmax.compile_ahead import start_search_compile, wait_for
search = SearchSettings(**json.loads(sys.argv[1]))
process = start_search_compile(20.0, "unit", SE2(), search, 1.0)
assert process is not None, "a cold cache must start a background compile"
wait_for(process)
print(process.returncode)
"""

# the sample search of the pipeline's knn stages and the library's candidate mode (its
# screened first pass and exact second pass), on letters rendered from their outlines
SEARCH = """
import json, sys
import numpy as np
from ia_stages.core.groups import SE2
from ia_stages.data.render import letter, render
from ia_stages.kmax import SearchSettings, kappa_max
from ia_stages.kmax.compile_ahead import search_kernel_cached
from ia_stages.kmax.features import FeatureSettings
from ia_stages.kmax.search_kernels import _search_range
from ia_stages.readout.graph import sample_sqdist
rng = np.random.default_rng(3)
params = np.column_stack([rng.uniform(0, 6.28, 6), rng.uniform(-2, 2, (6, 2))])
V = np.concatenate([render(letter(c), (32, 32), params[i::2]) for i, c in enumerate("FR")])
cached = search_kernel_cached()
sq = sample_sqdist(V, np.arange(6), 20.0, "unit", SE2(),
                   SearchSettings(**json.loads(sys.argv[1])), 1.0)
lists = kappa_max(V, k=3, beta=20.0, sigma=1.0, mode="candidates",
                  features=FeatureSettings(n_candidates=4, n_dims=4, n_expand=2))
stats = _search_range.stats
hits, misses = sum(stats.cache_hits.values()), sum(stats.cache_misses.values())
finite = bool(np.isfinite(sq).all() and np.isfinite(lists.sqdist).all())
print(json.dumps({"cached": cached, "hits": hits, "misses": misses, "finite": finite}))
"""


def _python(code: str, cache: str) -> str:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache}
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(SAMPLE_SEARCH)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_the_background_compile_is_the_build_the_knn_searches_load(tmp_path):
    cache = str(tmp_path / "numba-cache")
    assert _python(START, cache) == "0"
    seen = json.loads(_python(SEARCH, cache))
    # every search found its kernel in the cache the background process filled: no compile
    assert seen == {"cached": True, "hits": 1, "misses": 0, "finite": True}


def test_a_failed_background_compile_is_logged_and_the_job_goes_on(caplog):
    failing = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.exit('no compiler here')"],
        stderr=subprocess.PIPE,
        text=True,
    )
    with caplog.at_level(logging.WARNING, logger="ia_stages"):
        wait_for(failing)
    assert failing.returncode == 1
    assert "background compile failed (exit 1: no compiler here)" in caplog.text


def test_a_background_compile_past_its_limit_is_killed(caplog):
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with caplog.at_level(logging.WARNING, logger="ia_stages"):
        wait_for(slow, limit=0.5)
    assert slow.poll() is not None
    assert "ran past 0.5 s" in caplog.text


def test_a_job_that_stops_before_its_search_kills_the_background_compile(monkeypatch):
    started = []

    def sleeper(*args, **kwargs):
        started.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
        return started[-1]

    monkeypatch.setattr("ia_stages.kmax.compile_ahead.start_search_compile", sleeper)
    with pytest.raises(RuntimeError, match="bad input"):
        with search_compiled_ahead(20.0, "unit", SE2(), SearchSettings(), 1.0):
            raise RuntimeError("bad input")
    assert started and started[0].poll() is not None
    with search_compiled_ahead(20.0, "unit", SE2(), SearchSettings(), 1.0, on=False) as ready:
        ready()  # off: nothing started, nothing to wait for
    assert len(started) == 1


def test_the_knn_jobs_compile_their_own_sample_search_ahead(tmp_path, monkeypatch):
    """``knn-whole`` (and ``knn-features``) start the background compile with the settings
    of their sample search, for the input images' iteration only, from AHEAD_MIN_IMAGES
    images; the store is the one made without it."""
    import numpy as np
    import xarray as xr
    import yaml

    from ia_stages.core.groups import group_of
    from ia_stages.data.render import letter, render
    from ia_stages.pipeline.config import stage_settings, validate_config
    from ia_stages.pipeline.stages import knn
    from ia_stages.pipeline.stages.common import job_tree
    from ia_stages.pipeline.store import write_store

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, ".test", "config", "knn_tiny.yaml")) as f:
        cfg = yaml.safe_load(f)
    ds = cfg["datasets"]["mnist_rot"]
    ds.update(n=12)
    ds["settings"]["path"].update(sample=8)
    ds["settings"]["path"]["features"].update(n_candidates=6, n_expand=3, n_dims=8)
    settings = stage_settings(validate_config(cfg), "knn", "mnist_rot")
    t = job_tree(settings)
    rng = np.random.default_rng(5)
    p = np.column_stack([rng.uniform(0, 2 * np.pi, 12), rng.uniform(-1, 1, (12, 2))])
    X = np.concatenate([render(letter(ch, 14), (32, 32), p[i::3]) for i, ch in enumerate("RFP")])
    images = tmp_path / "images.zarr"
    write_store(xr.Dataset({"features": (("sample", "y", "x"), X)}), images)
    calls = []
    monkeypatch.setattr(
        "ia_stages.kmax.compile_ahead.start_search_compile", lambda *a: calls.append(a)
    )
    plain = knn.whole(images, tmp_path / "plain.zarr", settings)
    assert calls == []  # 12 images: below AHEAD_MIN_IMAGES
    monkeypatch.setattr("ia_stages.kmax.compile_ahead.AHEAD_MIN_IMAGES", 12)
    ahead = knn.whole(images, tmp_path / "ahead.zarr", settings)
    knn.features(images, tmp_path / "features.zarr", settings)
    wanted = (t.beta, t.normalization, group_of(t), knn_sample_search(t), t.sigma)
    assert calls == [wanted, wanted]
    knn.whole(images, tmp_path / "later.zarr", settings, previous=tmp_path / "plain.zarr")
    assert len(calls) == 2  # a later iteration finds the kernel compiled
    for name in ("indices", "sqdist", "params", "sample_sqdist"):
        np.testing.assert_array_equal(ahead[name].values, plain[name].values)


def test_the_candidate_mode_compiles_its_first_pass_ahead(monkeypatch):
    """``kappa_max(mode='candidates')`` (the estimator's kNN path) starts the background
    compile with its first pass's search from AHEAD_MIN_IMAGES images, not with candidates
    given (IA's later iterations); the lists are those made without it."""
    import numpy as np

    from ia_stages.data.render import letter, render
    from ia_stages.kmax import EXACT_SEARCH, kappa_max
    from ia_stages.settings.features import FeatureSettings
    from ia_stages.settings.path import first_pass_search

    rng = np.random.default_rng(6)
    p = np.column_stack([rng.uniform(0, 2 * np.pi, 12), rng.uniform(-1, 1, (12, 2))])
    X = np.concatenate([render(letter(ch, 14), (32, 32), p[i::3]) for i, ch in enumerate("RFP")])
    fs = FeatureSettings(n_candidates=6, n_dims=8, n_expand=3)
    calls = []
    monkeypatch.setattr(
        "ia_stages.kmax.compile_ahead.start_search_compile", lambda *a: calls.append(a)
    )
    run = dict(k=4, beta=20.0, sigma=1.0, mode="candidates", features=fs)
    plain = kappa_max(X, **run)
    assert calls == []
    monkeypatch.setattr("ia_stages.kmax.compile_ahead.AHEAD_MIN_IMAGES", 12)
    ahead = kappa_max(X, **run)
    assert calls == [(20.0, "unit", SE2(), first_pass_search(EXACT_SEARCH, fs.sized(12, 4)), 1.0)]
    kappa_max(X, **run, candidates=plain.indices)
    assert len(calls) == 1
    np.testing.assert_array_equal(ahead.indices, plain.indices)
    np.testing.assert_array_equal(ahead.sqdist, plain.sqdist)
