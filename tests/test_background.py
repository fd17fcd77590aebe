"""``background='mask'``: each noisy image keeps its object's support, its empty background
set to 0 (:mod:`ia_stages.core.background`), in the estimator, the images loader and the
cluster command. Data: letters rendered from their outlines at random angles (not our warp)
plus white noise."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from ia_stages import InvariantAttentionClustering, kappa_max
from ia_stages.core.background import border_median, subtract_background, support_mask
from ia_stages.data.render import letter, render
from ia_stages.data.user_images import load_images
from ia_stages.pipeline.cluster_command import images_config
from ia_stages.pipeline.config import ConfigError, validate_config
from ia_stages.settings.images import MaskSettings


def _letters(chars: str, copies: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for c in chars:
        params = np.column_stack(
            [rng.uniform(0, 2 * np.pi, copies), rng.uniform(-3, 3, (copies, 2))]
        )
        out.append(render(letter(c, height=22.0), (40, 40), params, psf=0.7))
    return np.concatenate(out), np.repeat(np.arange(len(chars)), copies)


@pytest.fixture(scope="module")
def letters():
    clean, label = _letters("RKGS", 6)
    noise = np.sqrt(clean.var(axis=(1, 2)).mean() / 0.25)  # SNR 1/4
    noisy = clean + np.random.default_rng(3).normal(0.0, noise, clean.shape)
    return clean, noisy, label


def test_the_mask_keeps_the_object_and_drops_the_empty_background(letters):
    clean, noisy, _ = letters
    level = noisy - border_median(noisy)[:, None, None]
    keep = support_mask(level)
    ink = clean > 0.2 * clean.max(axis=(1, 2), keepdims=True)
    # nearly every clearly inked pixel is kept (at SNR 1/4 a thin stroke's smoothed value can
    # sink below 4 noise sds) ...
    assert keep[ink].mean() > 0.97
    # ... and hardly any pixel more than 4 px from the letter (there only noise)
    far = ~ndimage.binary_dilation(clean > 1e-3, np.ones((1, 9, 9), bool))
    assert keep[far].mean() < 0.01
    out = subtract_background(noisy, "mask")
    np.testing.assert_array_equal(out[~keep], 0.0)
    np.testing.assert_array_equal(out[keep], level[keep])


def test_the_mask_turns_with_the_image(letters):
    """Smoothing, threshold, the square dilation and the frame's noise all commute with
    turns by 90 degrees (exact on the pixel grid)."""
    _, noisy, _ = letters
    turned = np.rot90(noisy, 1, axes=(1, 2))
    np.testing.assert_array_equal(support_mask(turned), np.rot90(support_mask(noisy), 1, (1, 2)))


def test_images_without_noise_are_left_as_they_are(letters):
    clean, _, _ = letters
    assert support_mask(clean).all()
    np.testing.assert_array_equal(subtract_background(clean, "mask"), clean)


def test_masked_noisy_letters_are_nearer_their_own_class(letters):
    """The empty background's noise adds to every pair's distance alike: without it the
    nearest neighbours are of the same letter more often, and each image's nearest of its own
    letter is nearer, relative to the nearest of another, than before."""
    _, noisy, label = letters

    def neighbours(X):
        d2 = kappa_max(X, beta=2.0, sigma=1.0).sqdist
        np.fill_diagonal(d2, np.inf)
        same = label[:, None] == label[None, :]
        own = np.where(same, d2, np.inf).min(1)
        other = np.where(~same, d2, np.inf).min(1)
        nearest = label[np.argmin(d2, 1)] == label
        return nearest.mean(), np.median(own / other)

    raw, masked = neighbours(noisy), neighbours(subtract_background(noisy, "mask"))
    assert masked[0] >= raw[0]
    assert masked[1] < raw[1] - 0.05


def test_the_estimator_masks_and_names_bad_options(letters):
    _, noisy, label = letters
    est = InvariantAttentionClustering(4, background="mask", random_state=0).fit(noisy)
    assert est.labels_.shape == label.shape
    with pytest.raises(ValueError, match="mask has no key 'thresh'; did you mean 'threshold'"):
        InvariantAttentionClustering(4, background="mask", config={"mask": {"thresh": 3}}).fit(
            noisy
        )
    with pytest.raises(ValueError, match=r"^mask\.threshold must be > 0"):
        InvariantAttentionClustering(4, background="mask", config={"mask": {"threshold": 0}}).fit(
            noisy
        )


def test_an_image_of_noise_alone_is_named_and_kept_whole(letters, tmp_path):
    _, noisy, _ = letters
    X = noisy.copy()
    X[5] = np.random.default_rng(9).normal(0.0, 1.0, X[5].shape)  # no object
    with pytest.warns(UserWarning, match=r"1 image\(s\) have no pixel above the noise") as rec:
        out = subtract_background(X, "mask", MaskSettings(threshold=6.0))
    assert "(the first: image 5); they are kept whole" in str(rec[0].message)
    np.testing.assert_array_equal(out[5], X[5] - border_median(X[5:6])[0])
    assert (out[:5, :3] == 0).mean() > 0.9  # the others are masked
    folder = tmp_path / "pngs"
    folder.mkdir()
    top, bottom = X.max(), X.min()
    for i, x in enumerate(X[:8]):
        png = np.round(255 * (x - bottom) / (top - bottom)).astype(np.uint8)
        Image.fromarray(png).save(folder / f"im{i:02d}.png")
    with pytest.warns(UserWarning, match=r"the first: im05.png \(image 5\)"):
        loaded = load_images(folder, background="mask", mask={"threshold": 6.0}).data
    assert loaded.shape == (8, 40, 40) and (loaded[5] != 0).mean() > 0.9  # whole


def test_the_cluster_command_passes_the_mask_as_settings(tmp_path):
    from ia_stages.pipeline.cli import build_parser
    from ia_stages.pipeline.flags import settings_of_flags

    args = build_parser().parse_args(
        ["cluster", str(tmp_path), "--out", "o", "--background", "mask", "--mask-threshold", "3"]
    )
    cfg = images_config(tmp_path, settings_of_flags(args))
    (ds,) = cfg["datasets"].values()
    assert ds["settings"] == {"background": "mask", "mask": {"threshold": 3.0}}


def test_the_config_names_a_bad_mask_setting(tmp_path):
    np.save(tmp_path / "x.npy", np.random.default_rng(0).random((4, 12, 12)))
    cfg = images_config(tmp_path / "x.npy", {"background": "mask", "mask": {"threshold": 0}})
    (name,) = cfg["datasets"]
    with pytest.raises(ConfigError, match=rf"datasets\.{name}\.settings': mask\.threshold"):
        validate_config(cfg)
