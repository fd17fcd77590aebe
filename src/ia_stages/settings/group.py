"""Settings of the group of transformations factored out (:func:`ia_stages.core.groups.make_group`
builds the group object from them)."""

from __future__ import annotations

from typing import Any

from ia_stages.settings.spec import SettingError, choice, integer, number, numbers, settings_part

GROUP_NAMES = ("se2", "similarity", "affine")


@settings_part("group")
class GroupSettings:
    """The transformations kappa^max, the invariant means and the poses factor out: SE(2), or
    a similarity / affine group whose extra parameters are refined locally within bounds
    after the SE(2) search (:mod:`ia_stages.kmax.group_refine`). Mirror images are the
    separate setting ``mirror``. In the YAML and the estimator ``group: affine`` is short for
    ``group: {name: affine}``."""

    name: str = choice(
        "se2", GROUP_NAMES, "'se2' (rotations and translations), 'similarity' or 'affine'",
        flag="--group",
    )  # fmt: skip
    scale: tuple[float, float] = numbers(
        (0.8, 1.25), "range of the scale sqrt(det A), low <= 1 <= high", low=0.0,
        low_open=True, length=2,
    )  # fmt: skip
    anisotropy: float = number(
        1.5, "largest axis ratio e^(2 |alpha|) of diag(e^alpha, e^-alpha); with shear it "
        "bounds every map's axis ratio, at any orientation", low=1.0,
    )  # fmt: skip
    shear: float = number(0.25, "largest |h| of the shear [[1, h], [0, 1]]", low=0.0,
                          high=1.0, high_open=True)  # fmt: skip
    iters: int = integer(2, "refinement evaluations per pair at full resolution", low=0)
    half_iters: int = integer(
        6, "evaluations per pair on 2 x 2 block means before the full-resolution ones; 0 = none",
        low=0,
    )  # fmt: skip
    tol: float = number(1e-9, "the refinement stops at a drop of d2 below this", low=0.0)
    lam0: float = number(1e-3, "initial Levenberg-Marquardt damping", low=0.0, low_open=True)
    floor: float = number(
        1e-3,
        "the refinement sums over the pixels where the target or the warped moving image can "
        "reach this fraction of its largest |value|; 0 = every pixel",
        low=0.0, high=1.0, high_open=True,
    )  # fmt: skip

    def relations(self) -> None:
        """Checks across fields (one line naming the field)."""
        low, high = self.scale
        if low > high:
            raise SettingError(f"group.scale is an inverted range {self.scale} (low > high)")
        if not low <= 1.0 <= high:
            raise SettingError(f"group.scale must contain 1, got {self.scale}")

    @classmethod
    def from_value(cls, value: Any) -> Any:
        """The group's dict from a shorthand: its name (``'affine'``), or a group object's
        settings (:meth:`ia_stages.core.groups.AffineFamily.settings`)."""
        if isinstance(value, str):
            return {"name": value}
        settings = getattr(value, "settings", None)
        if callable(settings):
            d = dict(settings())
            d.pop("mirror", None)
            return d
        return value
