"""Transformation groups acting on pixel coordinates.

Convention (see README): with centred coordinates c = ((H-1)/2, (W-1)/2), a transform with
matrix A and translation b maps an output pixel p to the sampling point
tau(p) = A (p - c) + c + b, and (v o tau)[p] = v[tau(p)]. Composition follows function
composition of the sampling maps: (v o tau1) o tau2 = v o (tau1 . tau2) with
(tau1 . tau2)(p) = tau1(tau2(p)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class SE2:
    """Rotations and translations of the plane, parameters ``(theta, b0, b1)``.

    ``theta`` is in radians, ``b`` in pixels (axis 0 = rows, axis 1 = columns) and
    A(theta) = [[cos, sin], [-sin, cos]]. Parameter arrays have shape ``(..., 3)``.
    """

    name: str = "se2"
    n_params: int = 3
    param_names: tuple[str, ...] = ("theta", "b0", "b1")

    def identity(self, n: int | None = None, xp: Any = np) -> Any:
        """Identity parameters, shape ``(3,)`` or ``(n, 3)``."""
        return xp.zeros((3,) if n is None else (n, 3))

    def matrix(self, params: Any) -> Any:
        """Linear part A, shape ``(..., 2, 2)``."""
        c, s = np.cos(params[..., 0]), np.sin(params[..., 0])
        return _stack2x2(c, s, -s, c)

    def translation(self, params: Any) -> Any:
        """Translation b, shape ``(..., 2)``."""
        return params[..., 1:3]

    def jacobian(self, params: Any) -> tuple[Any, Any]:
        """Derivatives of (A, b) with respect to the parameters.

        Returns
        -------
        dA : ``(..., 3, 2, 2)``, dA[..., k] = dA/dparam_k
        db : ``(..., 3, 2)``, db[..., k] = db/dparam_k
        """
        c, s = np.cos(params[..., 0]), np.sin(params[..., 0])
        z = 0.0 * c
        dA = np.stack([_stack2x2(-s, c, -c, -s), _stack2x2(z, z, z, z), _stack2x2(z, z, z, z)], -3)
        one = z + 1.0
        db = np.stack([np.stack([z, z], -1), np.stack([one, z], -1), np.stack([z, one], -1)], -2)
        return dA, db

    def compose(self, p1: Any, p2: Any) -> Any:
        """Parameters of tau1 . tau2 (apply tau2's sampling map first, then tau1's)."""
        A1 = self.matrix(p1)
        b = np.einsum("...ij,...j->...i", A1, p2[..., 1:3]) + p1[..., 1:3]
        return np.concatenate([wrap_angle(p1[..., :1] + p2[..., :1]), b], -1)

    def inverse(self, p: Any) -> Any:
        """Parameters of tau^-1."""
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
        """Draw ``n`` parameters: theta ~ U(rotation_deg), b_k ~ U(-shift_px[k], shift_px[k]).

        Returns ``(n, 3)`` float64.
        """
        theta = np.deg2rad(rng.uniform(rotation_deg[0], rotation_deg[1], n))
        b0 = rng.uniform(-shift_px[0], shift_px[0], n)
        b1 = rng.uniform(-shift_px[1], shift_px[1], n)
        return np.stack([theta, b0, b1], -1)


def _stack2x2(a: Any, b: Any, c: Any, d: Any) -> Any:
    return np.stack([np.stack([a, b], -1), np.stack([c, d], -1)], -2)


def wrap_angle(theta: Any) -> Any:
    """Map angles to (-pi, pi]."""
    return np.pi - np.mod(np.pi - theta, 2 * np.pi)
