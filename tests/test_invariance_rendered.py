"""kappa^max's invariance on shapes rendered at an angle (never warped by our code)."""

from functools import partial

import numpy as np
import pytest

from ia_stages import kappa_max
from ia_stages.theory import rendered_invariance_error


def test_kappa_max_defaults_are_invariant_on_rendered_letters():
    """The library default (sigma = 2 px) keeps kappa^max within 2% (beta 2) between two
    letters drawn at other angles; comparing the raw pixels (sigma = 0) does not."""
    shape = (32, 32)
    default = rendered_invariance_error(
        partial(kappa_max, beta=2.0), shape, np.random.default_rng(1), pairs=1, renderings=2
    )
    raw = rendered_invariance_error(
        partial(kappa_max, beta=2.0, sigma=0.0), shape, np.random.default_rng(1), 1, 2
    )
    assert default.max_rel_value < 2e-2
    assert raw.max_rel_value > 5 * default.max_rel_value
    # the relative value error is the d2 error seen through exp(-beta d2)
    assert default.max_abs_sqdist < default.max_rel_value


def test_rendered_invariance_error_refuses_unknown_pairs():
    with pytest.raises(ValueError, match="pairs"):
        rendered_invariance_error(partial(kappa_max, beta=2.0), (32, 32), None, pairs=9)
