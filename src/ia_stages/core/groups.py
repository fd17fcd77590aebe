"""Transformation groups acting on pixel coordinates.

Convention (the manual's page "The method"): with centred coordinates c = ((H-1)/2, (W-1)/2),
a transform with matrix A and translation b maps an output pixel p to the sampling point
tau(p) = A (p - c) + c + b, and (v o tau)[p] = v[tau(p)]. Composition follows function
composition of the sampling maps: (v o tau1) o tau2 = v o (tau1 . tau2) with
(tau1 . tau2)(p) = tau1(tau2(p)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ia_stages.settings.group import GroupSettings
from ia_stages.settings.spec import from_dict
from ia_stages.settings.tree import Settings, check_setting


@dataclass(frozen=True)
class SE2:
    """Rotations and translations of the plane, parameters ``(theta, b0, b1)``.

    ``theta`` is in radians, ``b`` in pixels (axis 0 = rows, axis 1 = columns) and
    A(theta) = [[cos, sin], [-sin, cos]]; the transform maps an output pixel p to the
    sampling point tau(p) = A (p - c) + c + b, c the image centre. Parameter arrays have
    shape ``(..., 3)``. The default group of every function that takes one.

    Parameters
    ----------
    name : str, default 'se2'
        the group's name in settings and stores
    n_params : int, default 3
        parameters per transform
    param_names : tuple of str, default ('theta', 'b0', 'b1')
        their names, in order

    Examples
    --------
    Composition follows the sampling maps, (v o tau1) o tau2 = v o (tau1 . tau2):

    >>> import numpy as np
    >>> from ia_stages import SE2
    >>> g = SE2()
    >>> p = np.array([0.3, 1.0, -2.0])
    >>> bool(np.allclose(g.compose(p, g.inverse(p)), g.identity()))
    True
    >>> g.matrix(np.array([np.pi / 2, 0.0, 0.0])).round(12).tolist()
    [[0.0, 1.0], [-1.0, 0.0]]
    """

    name: str = "se2"
    n_params: int = 3
    param_names: tuple[str, ...] = ("theta", "b0", "b1")

    def settings(self) -> dict:
        """The group's settings as the tree names them, as the stores' attrs record them.

        Returns
        -------
        dict
            ``{'name': 'se2', 'mirror': False}``
        """
        return {"name": "se2", "mirror": False}

    def scale(self, params: Any) -> Any:
        """sqrt|det A|: 1 for every rotation.

        Parameters
        ----------
        params : array_like of shape (..., 3)
            transforms

        Returns
        -------
        ndarray of shape (...,)
            ones
        """
        return 0.0 * params[..., 0] + 1.0

    def clip(self, params: Any) -> Any:
        """The parameters brought within the group's bounds: unchanged (SE(2) has none).

        Parameters
        ----------
        params : array_like of shape (..., 3)
            transforms

        Returns
        -------
        array_like of shape (..., 3)
            ``params``
        """
        return params

    def of_mirror_image(self, q: Any, flipped: Any) -> Any:
        """The parameters of transforms whose moving image is mirrored: SE(2) holds no mirror
        images, so ``flipped`` must be all False (:meth:`AffineFamily.of_mirror_image`).

        Parameters
        ----------
        q : array_like of shape (..., 3)
            SE(2) parameters
        flipped : array_like of bool, shape (...,)
            which transforms mirror the image

        Returns
        -------
        ndarray of shape (..., 3)
            ``q`` as float
        """
        if np.any(flipped):
            raise ValueError("group: a mirror image in a group without mirror=True")
        return np.asarray(q, dtype=float)

    def split_mirror(self, params: Any) -> tuple[Any, Any]:
        """The SE(2) part of each transform and whether it mirrors (never, in SE(2);
        :meth:`AffineFamily.split_mirror`).

        Parameters
        ----------
        params : array_like of shape (..., 3)
            transforms

        Returns
        -------
        params : ndarray of shape (..., 3)
            the parameters as float
        flipped : ndarray of bool, shape (...,)
            all False
        """
        params = np.asarray(params, dtype=float)
        return params, np.zeros(params.shape[:-1], dtype=bool)

    def identity(self, n: int | None = None, xp: Any = np) -> Any:
        """Identity parameters.

        Parameters
        ----------
        n : int or None, default None
            None for one transform ``(3,)``, else ``(n, 3)``
        xp : module, default numpy
            the array module (numpy or cupy)

        Returns
        -------
        ndarray of shape (3,) or (n, 3)
            zeros
        """
        return xp.zeros((3,) if n is None else (n, 3))

    def matrix(self, params: Any) -> Any:
        """The linear part A of each transform.

        Parameters
        ----------
        params : array_like of shape (..., 3)
            transforms

        Returns
        -------
        ndarray of shape (..., 2, 2)
            A = [[cos theta, sin theta], [-sin theta, cos theta]]
        """
        c, s = np.cos(params[..., 0]), np.sin(params[..., 0])
        return _stack2x2(c, s, -s, c)

    def translation(self, params: Any) -> Any:
        """The translation b of each transform.

        Parameters
        ----------
        params : array_like of shape (..., 3)
            transforms

        Returns
        -------
        ndarray of shape (..., 2)
            ``(b0, b1)`` in px
        """
        return params[..., 1:3]

    def jacobian(self, params: Any) -> tuple[Any, Any]:
        """Derivatives of (A, b) with respect to the parameters.

        Parameters
        ----------
        params : array_like of shape (..., 3)
            transforms

        Returns
        -------
        dA : ndarray of shape (..., 3, 2, 2)
            ``dA[..., k, :, :]`` = dA / dparam_k
        db : ndarray of shape (..., 3, 2)
            ``db[..., k, :]`` = db / dparam_k
        """
        c, s = np.cos(params[..., 0]), np.sin(params[..., 0])
        z = 0.0 * c
        dA = np.stack([_stack2x2(-s, c, -c, -s), _stack2x2(z, z, z, z), _stack2x2(z, z, z, z)], -3)
        one = z + 1.0
        db = np.stack([np.stack([z, z], -1), np.stack([one, z], -1), np.stack([z, one], -1)], -2)
        return dA, db

    def compose(self, p1: Any, p2: Any) -> Any:
        """Parameters of tau1 . tau2 (apply tau2's sampling map first, then tau1's):
        theta = theta1 + theta2, b = A1 b2 + b1.

        Parameters
        ----------
        p1 : array_like of shape (..., 3)
            tau1
        p2 : array_like of shape (..., 3)
            tau2

        Returns
        -------
        ndarray of shape (..., 3)
            tau1 . tau2, the angle wrapped to [-pi, pi)
        """
        A1 = self.matrix(p1)
        b = np.einsum("...ij,...j->...i", A1, p2[..., 1:3]) + p1[..., 1:3]
        return np.concatenate([wrap_angle(p1[..., :1] + p2[..., :1]), b], -1)

    def inverse(self, p: Any) -> Any:
        """Parameters of the inverse transform.

        Parameters
        ----------
        p : array_like of shape (..., 3)
            tau

        Returns
        -------
        ndarray of shape (..., 3)
            tau^-1
        """
        A_inv = self.matrix(-p)
        b = -np.einsum("...ij,...j->...i", A_inv, p[..., 1:3])
        return np.concatenate([wrap_angle(-p[..., :1]), b], -1)

    def sample(
        self,
        rng: np.random.Generator,
        n: int,
        rotation_deg: tuple[float, float],
        shift_px: tuple[float, float],
    ) -> np.ndarray:
        """Draw random transforms: theta ~ U(rotation_deg), b_k ~ U(-shift_px[k], shift_px[k]).

        Parameters
        ----------
        rng : numpy.random.Generator
            the random numbers
        n : int
            transforms to draw
        rotation_deg : tuple of (float, float)
            the range of angles, in degrees
        shift_px : tuple of (float, float)
            the largest shift along each axis, in px

        Returns
        -------
        ndarray of float64, shape (n, 3)
            the transforms
        """
        theta = np.deg2rad(rng.uniform(rotation_deg[0], rotation_deg[1], n))
        b0 = rng.uniform(-shift_px[0], shift_px[0], n)
        b1 = rng.uniform(-shift_px[1], shift_px[1], n)
        return np.stack([theta, b0, b1], -1)


def stretch_entries(t0: float, t1: float) -> tuple[float, ...]:
    """The stretch K = expm([[t0, t1], [t1, -t0]]) and its derivatives with respect to t0 and
    t1, each as its entries (k00, k01, k11) (K is symmetric): nine floats.

    Plain scalar Python: the one source of K, compiled into the refinement's CPU and CUDA
    kernels (:mod:`ia_stages.kmax.group_refine`) and vectorised for arrays here.

    Example
    -------
    >>> [round(x, 6) for x in stretch_entries(0.0, 0.0)]
    [1.0, 0.0, 1.0, 1.0, 0.0, -1.0, 0.0, 1.0, 0.0]
    """
    n2 = t0 * t0 + t1 * t1
    n = math.sqrt(n2)
    ch = math.cosh(n)
    if n < 1e-3:  # the series of sinh(n) / n and of its derivative / n
        shc, f2 = 1.0 + n2 / 6.0, 1.0 / 3.0 + n2 / 30.0
    else:
        shc = math.sinh(n) / n
        f2 = (ch - shc) / n2
    # K = cosh|t| I + shc [[t0, t1], [t1, -t0]];
    # dK/dt_i = shc t_i I + f2 t_i [[t0, t1], [t1, -t0]] + shc Z_i
    return (ch + shc * t0, shc * t1, ch - shc * t0,
            shc * t0 + f2 * t0 * t0 + shc, f2 * t0 * t1, shc * t0 - f2 * t0 * t0 - shc,
            shc * t1 + f2 * t1 * t0, f2 * t1 * t1 + shc, shc * t1 - f2 * t1 * t0)  # fmt: skip


_STRETCH_ARRAYS = np.vectorize(stretch_entries, otypes=[float] * 9)


def _stretch(t0: Any, t1: Any) -> tuple[tuple[Any, Any, Any], ...]:
    """:func:`stretch_entries` over arrays: (K, dK/dt0, dK/dt1), each (k00, k01, k11). No
    stretch anywhere (SE(2) and similarity, whose t is 0) skips the per-element call."""
    t0, t1 = np.asarray(t0, dtype=float), np.asarray(t1, dtype=float)
    if not (t0.any() or t1.any()):
        one, zero = np.ones(np.broadcast(t0, t1).shape), np.zeros(np.broadcast(t0, t1).shape)
        return (one, zero, one), (one, zero, -one), (zero, one, zero)
    e = _STRETCH_ARRAYS(t0, t1)
    return e[0:3], e[3:6], e[6:9]


def _stack2x2(a: Any, b: Any, c: Any, d: Any) -> Any:
    return np.stack([np.stack([a, b], -1), np.stack([c, d], -1)], -2)


def wrap_angle(theta: Any) -> Any:
    """Map angles to (-pi, pi]."""
    return np.pi - np.mod(np.pi - theta, 2 * np.pi)


@dataclass(frozen=True)
class GroupBounds:
    """Bounds of the parameters that the local refinement adds to SE(2).

    scale : ``(low, high)``, default ``(0.8, 1.25)``: the range of the scale sqrt(det A)
        (0 < low <= 1 <= high)
    anisotropy : default 1.5: a largest ratio of the two axis stretches, e^(2 |alpha|) (>= 1)
    shear : default 0.25: a largest |h| of the shear [[1, h], [0, 1]] (0 <= shear < 1)

    anisotropy and shear bound a map's axis ratio together (:meth:`axis_ratio`): the group
    holds every map as anisotropic as diag(e^alpha, e^-alpha) [[1, h], [0, 1]] within them
    can be, at any orientation.
    """

    scale: tuple[float, float] = (0.8, 1.25)
    anisotropy: float = 1.5
    shear: float = 0.25

    def __post_init__(self) -> None:  # the ranges are GroupSettings' (make_group checks them)
        object.__setattr__(self, "scale", tuple(float(x) for x in self.scale))

    def axis_ratio(self) -> float:
        """The largest axis ratio (the larger singular value of A over the smaller) of a map
        diag(e^alpha, e^-alpha) [[1, h], [0, 1]] with e^(2 |alpha|) <= ``anisotropy`` and |h| <=
        ``shear``: the bound the search puts on every map's axis ratio, so that the maps it
        searches are those, rotated on either side (:class:`AffineFamily`).

        Example
        -------
        >>> round(GroupBounds(anisotropy=1.5, shear=0.0).axis_ratio(), 12)
        1.5
        >>> round(GroupBounds(anisotropy=1.5, shear=0.25).axis_ratio(), 3)  # the defaults
        1.657
        """
        e2, h = float(self.anisotropy), float(self.shear)
        frob = e2 * (1.0 + h * h) + 1.0 / e2  # ||D S||_F^2 at the corner that maximises it
        return (frob + math.sqrt(max(frob * frob - 4.0, 0.0))) / 2.0  # sigma_1^2, det = 1

    def limits(self) -> tuple[float, float, float]:
        """(log_scale_low, log_scale_high, log_stretch_max) as the refinement reads them;
        log_stretch_max = log(axis_ratio) / 2 bounds the norm of the log-stretch parameters."""
        return (
            math.log(self.scale[0]),
            math.log(self.scale[1]),
            0.5 * math.log(self.axis_ratio()),
        )


@dataclass(frozen=True)
class AffineFamily:
    """SE(2), similarity or affine maps, optionally with mirror images.

    Parameters are ``(theta, b0, b1, [log_scale, [log_stretch_0, log_stretch_1]], [mirror])``:
    SE(2)'s first, so that ``params[..., 0]`` is the angle and ``params[..., 1:3]`` the
    translation in every group. The linear part is

        A = F^m R(theta) e^log_scale K,  K = expm([[t0, t1], [t1, -t0]])

    with R(theta) = [[cos, sin], [-sin, cos]] (as :class:`SE2`), K the symmetric stretch of
    determinant 1 whose axis ratio is e^(2 |t|) (t = (log_stretch_0, log_stretch_1)), and F =
    diag(1, -1) the mirror of the columns (m = the ``mirror`` parameter, 0 or 1, present only
    with ``mirror=True``). Every affine map of positive determinant has one such form (the
    polar decomposition). The bounds hold log_scale in the scale range and |t| at most
    :meth:`GroupBounds.limits`' log_stretch_max: a set that depends on A's singular values
    only, so it holds R1 A R2 with A for every rotation R1, R2, and A^-1 with A where the
    scale range is symmetric about 1. That makes the bounded kappa^max invariant to rotations
    of either image and symmetric; bounds on a shear parameter would not be (rotating the
    second image changes a map's shear). The scale sqrt|det A| = e^log_scale; a warp by A
    multiplied by it is norm preserving (kappa^max uses that: a change of area does not bias
    the score).

    name : 'se2', 'similarity' or 'affine'
    mirror : default False: the group also holds the mirror images
    bounds : :class:`GroupBounds` for the local refinement of the extra parameters
    iters : default 2: the refinement's most evaluations per pair at full resolution
    tol : default 1e-9: it stops at a drop of d2 below this
    lam0 : default 1e-3: its initial Levenberg-Marquardt damping
    half_iters : default 6: evaluations per pair on 2 x 2 block means of the images before the
        ``iters`` at full resolution (a quarter of the pixels each; 0 = none; images of an odd
        size run them at full resolution: :func:`ia_stages.kmax.group_refine.refine_in_stages`)
    floor : default 1e-3: the refinement visits only the pixels where the target or the
        warped moving image can reach this fraction of its largest |value| (per row, the
        columns between the first and the last such pixel of either,
        :func:`ia_stages.kmax.group_refine._group_eval`), not the smoothed images' far tails;
        0 = every pixel

    Example
    -------
    >>> g = make_group("affine", mirror=True)
    >>> p = g.identity()
    >>> (g.matrix(p) + 0.0).tolist()  # + 0.0: -0.0 prints as 0.0
    [[1.0, 0.0], [0.0, 1.0]]
    """

    name: str = "affine"
    mirror: bool = False
    bounds: GroupBounds = GroupBounds()
    iters: int = 2
    tol: float = 1e-9
    lam0: float = 1e-3
    half_iters: int = 6
    floor: float = 1e-3

    @property
    def n_extra(self) -> int:
        """Continuous parameters beyond SE(2)'s: 0, 1 (similarity) or 3 (affine)."""
        return {"se2": 0, "similarity": 1, "affine": 3}[self.name]

    @property
    def n_continuous(self) -> int:
        return 3 + self.n_extra

    @property
    def n_params(self) -> int:
        return self.n_continuous + int(self.mirror)

    @property
    def param_names(self) -> tuple[str, ...]:
        names = ("theta", "b0", "b1", "log_scale", "log_stretch_0", "log_stretch_1")
        names = names[: self.n_continuous]
        return names + (("mirror",) if self.mirror else ())

    def settings(self) -> dict:
        """The group's settings as the tree names them (:class:`~ia_stages.settings.
        GroupSettings`' keys and ``mirror``), as the stores' attrs record them."""
        return {
            "name": self.name,
            "mirror": bool(self.mirror),
            "scale": list(self.bounds.scale),
            "anisotropy": float(self.bounds.anisotropy),
            "shear": float(self.bounds.shear),
            "iters": int(self.iters),
            "half_iters": int(self.half_iters),
            "tol": float(self.tol),
            "lam0": float(self.lam0),
            "floor": float(self.floor),
        }

    def identity(self, n: int | None = None, xp: Any = np) -> Any:
        """Identity parameters, shape ``(n_params,)`` or ``(n, n_params)``."""
        return xp.zeros((self.n_params,) if n is None else (n, self.n_params))

    def embed(self, se2_params: Any, mirror: Any = 0.0) -> Any:
        """The element with SE(2) parameters ``(..., 3)`` and no extra deformation; ``mirror``
        (0 or 1, broadcast) sets the mirror parameter where the group has one."""
        p = np.zeros((*np.shape(se2_params)[:-1], self.n_params))
        p[..., :3] = se2_params
        if self.mirror:
            p[..., -1] = mirror
        return p

    def of_mirror_image(self, q: Any, flipped: Any) -> Any:
        """The elements ``(..., n_params)`` that warp an image v as the continuous parameters
        ``q (..., n_continuous)`` warp it, or, where ``flipped`` (bool, broadcast), as ``q``
        warps v's mirror image v_F (columns reversed): v_F o tau_q = v o tau with A = F A_q and
        b = F b_q (the column shift's sign changes). The search of a pair over both an image
        and its mirror image returns ``q`` and ``flipped``; :meth:`split_mirror` undoes this.

        Example
        -------
        >>> g = make_group("se2", mirror=True)
        >>> g.of_mirror_image(np.array([[0.5, 1.0, 2.0]]), np.array([True])).tolist()
        [[0.5, 1.0, -2.0, 1.0]]
        """
        q = np.asarray(q, dtype=float)
        flipped = np.broadcast_to(np.asarray(flipped, dtype=bool), q.shape[:-1])
        p = np.zeros((*q.shape[:-1], self.n_params))
        p[..., : self.n_continuous] = q[..., : self.n_continuous]
        if self.mirror:
            p[..., 2] = np.where(flipped, -q[..., 2], q[..., 2])
            p[..., -1] = flipped
        elif np.any(flipped):
            raise ValueError("group: a mirror image in a group without mirror=True")
        return p

    def split_mirror(self, params: Any) -> tuple[Any, Any]:
        """``(q, flipped)`` of elements ``params (..., n_params)``: the inverse of
        :meth:`of_mirror_image` (``flipped`` all False for a group without mirrors).

        Example
        -------
        >>> g = make_group("se2", mirror=True)
        >>> q, flipped = g.split_mirror(np.array([[0.5, 1.0, -2.0, 1.0]]))
        >>> q.tolist(), flipped.tolist()
        ([[0.5, 1.0, 2.0]], [True])
        """
        params = np.asarray(params, dtype=float)
        q = np.array(params[..., : self.n_continuous])
        if not self.mirror:
            return q, np.zeros(params.shape[:-1], dtype=bool)
        flipped = np.round(params[..., -1]) == 1
        q[..., 2] = np.where(flipped, -q[..., 2], q[..., 2])
        return q, flipped

    def _parts(self, params: Any) -> tuple[Any, ...]:
        params = np.asarray(params, dtype=float)
        z = 0.0 * params[..., 0]
        th = params[..., 0]
        sig = params[..., 3] if self.n_extra >= 1 else z
        t0 = params[..., 4] if self.n_extra >= 3 else z
        t1 = params[..., 5] if self.n_extra >= 3 else z
        m = params[..., -1] if self.mirror else z
        return th, sig, t0, t1, m

    def _linear(self, params: Any, derivatives: bool = False) -> tuple[Any, tuple[Any, ...]]:
        """A ``(..., 2, 2)`` and, with ``derivatives``, dA / d(theta, log_stretch_0,
        log_stretch_1) (dA / d log_scale = A); else an empty tuple."""
        th, sig, t0, t1, m = self._parts(params)
        c, s, e = np.cos(th), np.sin(th), np.exp(sig)
        f = np.where(np.round(m) == 1, -1.0, 1.0)
        k, dk0, dk1 = _stretch(t0, t1)

        def rot(k00, k01, k11, cc, ss):  # F e [[cc, ss], [-ss, cc]] K
            top = (e * (cc * k00 + ss * k01), e * (cc * k01 + ss * k11))
            return _stack2x2(*top, f * e * (-ss * k00 + cc * k01), f * e * (-ss * k01 + cc * k11))

        A = rot(*k, c, s)
        if not derivatives:
            return A, ()
        return A, (rot(*k, -s, c), rot(*dk0, c, s), rot(*dk1, c, s))

    def matrix(self, params: Any) -> Any:
        """The linear part A of each transform.

        Parameters
        ----------
        params : array_like of shape (..., 3)
            transforms

        Returns
        -------
        ndarray of shape (..., 2, 2)
            A = [[cos theta, sin theta], [-sin theta, cos theta]]
        """
        return self._linear(params)[0]

    def translation(self, params: Any) -> Any:
        """The translation b of each transform.

        Parameters
        ----------
        params : array_like of shape (..., 3)
            transforms

        Returns
        -------
        ndarray of shape (..., 2)
            ``(b0, b1)`` in px
        """
        return np.asarray(params)[..., 1:3]

    def scale(self, params: Any) -> Any:
        """sqrt|det A| = e^log_scale, shape ``(...,)``."""
        return np.exp(self._parts(params)[1])

    def clip(self, params: Any) -> Any:
        """``params`` projected into the bounds (a copy): log_scale clipped to its range, the
        log-stretch (t0, t1) scaled back onto the disk |t| <= log_stretch_max."""
        p = np.array(params, dtype=float)
        lo, hi, t_max = self.bounds.limits()
        if self.n_extra >= 1:
            p[..., 3] = np.clip(p[..., 3], lo, hi)
        if self.n_extra >= 3:
            norm = np.hypot(p[..., 4], p[..., 5])
            shrink = np.where(norm > t_max, t_max / np.where(norm > 0, norm, 1.0), 1.0)
            p[..., 4] *= shrink
            p[..., 5] *= shrink
        return p

    def jacobian(self, params: Any) -> tuple[Any, Any]:
        """Derivatives of (A, b) with respect to the parameters (0 for the discrete mirror).

        Returns
        -------
        dA : ``(..., n_params, 2, 2)``, db : ``(..., n_params, 2)``
        """
        A, (d_th, d_t0, d_t1) = self._linear(params, derivatives=True)
        z = 0.0 * self._parts(params)[0]
        zero = _stack2x2(z, z, z, z)
        dA = [d_th, zero, zero, A, d_t0, d_t1][: self.n_continuous] + [zero] * int(self.mirror)
        one = z + 1.0
        db = [np.stack([z, z], -1)] * self.n_params
        db[1], db[2] = np.stack([one, z], -1), np.stack([z, one], -1)
        return np.stack(dA, -3), np.stack(db, -2)

    def from_matrix(self, A: Any, b: Any) -> Any:
        """Parameters of the map with linear part ``A (..., 2, 2)`` and translation ``b (..., 2)``
        (the inverse of :meth:`matrix`; A must lie in the group: raises otherwise)."""
        A = np.array(A, dtype=float)
        det = A[..., 0, 0] * A[..., 1, 1] - A[..., 0, 1] * A[..., 1, 0]
        m = (det < 0).astype(float)
        if not self.mirror and np.any(m):
            raise ValueError("group: a mirror image in a group without mirror=True")
        A[..., 1, :] *= np.where(m == 1, -1.0, 1.0)[..., None]  # F^m A: now det > 0
        # polar decomposition A = R(theta) e^sig K, K symmetric positive definite, det K = 1:
        # R(theta) is the rotation nearest to A, theta = atan2(A01 - A10, A00 + A11)
        th = np.arctan2(A[..., 0, 1] - A[..., 1, 0], A[..., 0, 0] + A[..., 1, 1])
        c, s = np.cos(th), np.sin(th)
        e = np.sqrt(np.abs(det))
        k00 = (c * A[..., 0, 0] - s * A[..., 1, 0]) / e  # R(theta)^T A / e^sig = K
        k01 = (c * A[..., 0, 1] - s * A[..., 1, 1]) / e
        k11 = (s * A[..., 0, 1] + c * A[..., 1, 1]) / e
        # K = cosh|t| I + sinh|t| / |t| [[t0, t1], [t1, -t0]]
        norm = np.arccosh(np.maximum(0.5 * (k00 + k11), 1.0))
        shc = np.where(norm > 1e-8, np.sinh(norm) / np.where(norm > 0, norm, 1.0), 1.0)
        t0, t1 = 0.5 * (k00 - k11) / shc, k01 / shc
        parts = [th, b[..., 0], b[..., 1], np.log(e), t0, t1][: self.n_continuous]
        if self.mirror:
            parts.append(m)
        return np.stack(parts, -1)

    def compose(self, p1: Any, p2: Any) -> Any:
        """Parameters of tau1 . tau2 (apply tau2's sampling map first, then tau1's):
        theta = theta1 + theta2, b = A1 b2 + b1.

        Parameters
        ----------
        p1 : array_like of shape (..., 3)
            tau1
        p2 : array_like of shape (..., 3)
            tau2

        Returns
        -------
        ndarray of shape (..., 3)
            tau1 . tau2, the angle wrapped to [-pi, pi)
        """
        A1, A2 = self.matrix(p1), self.matrix(p2)
        b = np.einsum("...ij,...j->...i", A1, self.translation(p2)) + self.translation(p1)
        return self.from_matrix(np.einsum("...ij,...jk->...ik", A1, A2), b)

    def inverse(self, p: Any) -> Any:
        """Parameters of the inverse transform.

        Parameters
        ----------
        p : array_like of shape (..., 3)
            tau

        Returns
        -------
        ndarray of shape (..., 3)
            tau^-1
        """
        A_inv = np.linalg.inv(self.matrix(p))
        return self.from_matrix(A_inv, -np.einsum("...ij,...j->...i", A_inv, self.translation(p)))


def has_mirror(group: SE2 | AffineFamily) -> bool:
    """Whether ``group`` holds mirror images (its parameters then end in the mirror flag).

    Example
    -------
    >>> has_mirror(SE2()), has_mirror(make_group("similarity", mirror=True))
    (False, True)
    """
    return bool(getattr(group, "mirror", False))


def lists_group(group: SE2 | AffineFamily) -> SE2 | AffineFamily:
    """The group a kNN mode searches its lists in: SE(2), with mirror images where ``group``
    has them; a group with more parameters refines its lists' pairs from there
    (:func:`ia_stages.kmax.group_search.refine_knn`).

    Example
    -------
    >>> lists_group(make_group("affine", mirror=True)).param_names
    ('theta', 'b0', 'b1', 'mirror')
    >>> lists_group(make_group("similarity"))
    SE2(name='se2', n_params=3, param_names=('theta', 'b0', 'b1'))
    """
    if has_mirror(group):
        return group if group.name == "se2" else replace(group, name="se2")
    return SE2()


def check_lists_group(group: SE2 | AffineFamily, what: str) -> None:
    """Stop with one line naming ``group`` unless it is its own :func:`lists_group` (SE(2),
    with or without mirrors): ``what`` searches nothing else.

    Example
    -------
    >>> check_lists_group(make_group("se2", mirror=True), "the kNN scan")
    """
    if group != lists_group(group):
        raise ValueError(
            f"group: {what} searches SE(2) (with mirror images), not {group.name!r}; "
            "kappa_max(k=..., group=...) refines the lists over it"
        )


def make_group(
    group: str | GroupSettings | dict = "se2", mirror: bool = False, **given: Any
) -> SE2 | AffineFamily:
    """The group of the settings ``group`` (its name, a
    :class:`~ia_stages.settings.GroupSettings` or a dict of its keys, with the keys ``given``
    laid over), with mirror images when ``mirror``.

    ``se2`` without mirror gives :class:`SE2`; every other choice an :class:`AffineFamily`
    whose extra parameters are refined within the bounds (scale, anisotropy, shear) by the
    refinement's settings (iters, half_iters, tol, lam0, floor). Bad values raise a one-line
    :class:`~ia_stages.settings.SettingError` naming the key (``group.scale``).

    Parameters
    ----------
    group : str, GroupSettings or dict, default 'se2'
        The group's name ('se2', 'similarity', 'affine'), its settings, or a dict of their
        keys: the bounds of the extra parameters (scale, anisotropy, shear) and the
        refinement's settings (iters, half_iters, tol, lam0, floor).
    mirror : bool, default False
        Also match mirror images.
    **given
        Keys of :class:`~ia_stages.settings.GroupSettings` laid over ``group``'s.

    Returns
    -------
    SE2 or AffineFamily
        the group

    Raises
    ------
    SettingError
        one line naming the setting (``group.scale``) of a bad value

    Examples
    --------
    >>> from ia_stages.core.groups import make_group
    >>> make_group("similarity", scale=(0.9, 1.1)).param_names
    ('theta', 'b0', 'b1', 'log_scale')
    >>> make_group("affine", mirror=True).n_params
    7
    >>> make_group("se2")
    SE2(name='se2', n_params=3, param_names=('theta', 'b0', 'b1'))
    """
    base = from_dict(GroupSettings, group) if not isinstance(group, GroupSettings) else group
    gs = from_dict(GroupSettings, given, base) if given else base
    check_setting("mirror", mirror)
    if gs.name == "se2" and not mirror:
        return SE2()
    bounds = GroupBounds(gs.scale, gs.anisotropy, gs.shear)
    return AffineFamily(gs.name, mirror, bounds, gs.iters, gs.tol, gs.lam0, gs.half_iters,
                        gs.floor)  # fmt: skip


def group_of(s: Settings) -> SE2 | AffineFamily:
    """The group object of the settings tree ``s``: its ``group`` with its ``mirror``.

    Example
    -------
    >>> from ia_stages.settings import Settings
    >>> group_of(Settings.from_dict({"group": "affine", "mirror": True})).n_params
    7
    """
    return make_group(s.group, s.mirror)
