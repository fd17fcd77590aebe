"""kappa^max's invariance on shapes rendered at an angle (never warped by our code)."""

from functools import partial

import numpy as np
import pytest

from ia_stages import kappa_max
from ia_stages.benchmark.theory import rendered_invariance_error
from ia_stages.kmax import SearchSettings

SHAPE = (32, 32)


def _error(**kw):
    kernel = partial(kappa_max, beta=2.0, **kw)
    return rendered_invariance_error(kernel, SHAPE, np.random.default_rng(1), 1, 2)


def test_kappa_max_defaults_are_invariant_on_rendered_letters():
    """With the library defaults (sigma = 2 px, B-spline warps) kappa^max changes by less than
    1e-3 (beta 2) between two letters drawn at other angles (a camera blur of 0.5 px);
    comparing the raw pixels (sigma = 0) changes it far more."""
    default = _error()
    raw = _error(sigma=0.0)
    assert default.max_rel_value < 1e-3
    assert raw.max_rel_value > 10 * default.max_rel_value
    # the relative value error is the d2 error seen through exp(-beta d2)
    assert default.max_abs_sqdist < default.max_rel_value


def test_bspline_warps_are_more_invariant_than_keys_at_sigma_1():
    """Keys interpolation attenuates mid frequencies by an amount that depends on the angle of
    the warp; at sigma = 1 px that dominates the invariance error on rendered letters."""
    keys = _error(sigma=1.0, settings=SearchSettings(interpolation="keys"))
    spline = _error(sigma=1.0, settings=SearchSettings(interpolation="bspline"))
    assert spline.max_rel_value < 1e-3
    assert keys.max_rel_value > 3 * spline.max_rel_value


def test_rendered_invariance_error_refuses_unknown_pairs():
    with pytest.raises(ValueError, match="pairs"):
        rendered_invariance_error(partial(kappa_max, beta=2.0), SHAPE, None, pairs=9)
