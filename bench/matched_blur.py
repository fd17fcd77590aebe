"""Why kappa^max under scale cannot be invariant on pixel images: a smoothing matched to each
pair's map makes an image agree with its own affine rendering, but not two different shapes
with theirs.

Usage: python bench/matched_blur.py [--psf 1] [--sigma 2] [--size 48] [--height 24]

The objective d2(u, v; tau) = ||u' - s v' o tau||^2 (s = sqrt|det A|, unit-norm images) at a
given map, with u', v' either smoothed by sigma in their own pixels (as kappa^max does) or by
the matched smoothing of this script (not in the library): with b^2 = psf^2 + sigma^2, u by
b^2 (A^T A)^(-1/2) - psf^2 and v by b^2 (A A^T)^(1/2) - psf^2 (anisotropic Gaussians, FFT),
so that both carry the same blur in the pair's common frame.

1. One letter rendered (``ia_stages.data.render``, camera blur ``--psf``) under a random map of
   the group against its upright rendering, at that map: d2 should be 0.
2. Two different letters rendered under independent random maps against the upright pair, at
   the map that corresponds exactly to a fixed map of the upright pair: d2 should equal the
   upright pair's. Both renders of a pair scaled alike keep their relative map, but their blur,
   fixed in pixels, changes in the shapes' units, and so does the distance of different shapes.
"""

from __future__ import annotations

import argparse

import numpy as np
from groups import draw, outline
from scipy import ndimage

from ia_stages.core.groups import make_group
from ia_stages.core.smoothing import smooth
from ia_stages.core.warp import sampling_field
from ia_stages.data.render import render

AFFINE = make_group("affine")


def blur(img: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Gaussian of covariance ``C`` (rows, columns; px^2), zero outside the image."""
    pad = 24
    big = np.pad(img, pad)
    ky = np.fft.fftfreq(big.shape[0])[:, None] * 2 * np.pi
    kx = np.fft.fftfreq(big.shape[1])[None, :] * 2 * np.pi
    H = np.exp(-0.5 * (C[0, 0] * ky**2 + 2 * C[0, 1] * ky * kx + C[1, 1] * kx**2))
    return np.real(np.fft.ifft2(np.fft.fft2(big) * H))[pad:-pad, pad:-pad]


def sqrt_spd(M: np.ndarray) -> np.ndarray:
    w, V = np.linalg.eigh(M)
    return (V * np.sqrt(w)) @ V.T


def d2(u, v, q, matched: bool, psf: float, sigma: float) -> float:
    A = AFFINE.matrix(q)
    if matched:
        b2 = psf**2 + sigma**2
        uu = blur(u, b2 * np.linalg.inv(sqrt_spd(A.T @ A)) - psf**2 * np.eye(2))
        vv = blur(v, b2 * sqrt_spd(A @ A.T) - psf**2 * np.eye(2))
    else:
        uu, vv = smooth(u, sigma), smooth(v, sigma)
    uu, vv = uu / np.linalg.norm(uu), vv / np.linalg.norm(vv)
    f = sampling_field(A[None], q[None, 1:3], u.shape)[0]
    w = np.sqrt(abs(np.linalg.det(A))) * ndimage.map_coordinates(vv, f, order=5, mode="constant")
    return float(((uu - w) ** 2).sum())


def homogeneous(q: np.ndarray, shape) -> np.ndarray:
    c = np.array([(shape[0] - 1) / 2, (shape[1] - 1) / 2])
    T = np.eye(3)
    T[:2, :2] = AFFINE.matrix(q)
    T[:2, 2] = c + q[1:3] - T[:2, :2] @ c
    return T


def params_of(T: np.ndarray, shape) -> np.ndarray:
    c = np.array([(shape[0] - 1) / 2, (shape[1] - 1) / 2])
    b = T[:2, 2] - c + T[:2, :2] @ c
    return AFFINE.from_matrix(T[:2, :2], b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--psf", type=float, default=1.0)
    ap.add_argument("--sigma", type=float, default=2.0)
    ap.add_argument("--size", type=int, default=48)
    ap.add_argument("--height", type=float, default=24.0)
    args = ap.parse_args()
    S, psf, sig = (args.size, args.size), args.psf, args.sigma
    rng = np.random.default_rng(1)
    print(f"1. a letter against its own rendering under a random map (1/4 of the default "
          f"bounds), psf {psf} px, sigma {sig} px: d2 at that map (0 if invariant)")  # fmt: skip
    for gname in ("similarity", "affine"):
        for name in ("R", "F", "star"):
            o = outline(name, args.height)
            p = draw(make_group(gname), rng, 1, 0.25)[0]
            u = render([o], S, params=p[None, :3], psf=psf, linear=AFFINE.matrix(p)[None])[0]
            v = render([o], S, psf=psf)[0]
            print(f"   {gname:<10} {name:<5} plain {d2(u, v, p, False, psf, sig):.2e}  "
                  f"matched {d2(u, v, p, True, psf, sig):.2e}")  # fmt: skip
    print(
        "2. R against K, each rendered under its own random similarity map (1/4 of the "
        "bounds), at the map that corresponds exactly to a fixed map of the upright pair"
    )
    shapes = [outline("R", args.height), outline("K", args.height)]
    ref = render(shapes, S, psf=psf)
    q_ref = np.array([0.3, 0.4, -0.2, -0.1, 0.0, 0.0])
    upright = [d2(ref[0], ref[1], q_ref, m, psf, sig) for m in (False, True)]
    print(f"   upright pair: plain {upright[0]:.4f}  matched {upright[1]:.4f}")
    for k in range(4):
        P = draw(make_group("similarity"), rng, 2, 0.25)
        u, v = (render([shapes[i]], S, params=P[i : i + 1, :3], psf=psf,
                       linear=AFFINE.matrix(P[i : i + 1]))[0] for i in range(2))  # fmt: skip
        # u = ref0 o tau_0 and v = ref1 o tau_1, so ref0 - s ref1 o tau corresponds to
        # u - s v o tau' with tau' = tau_1^-1 tau tau_0
        T = np.linalg.inv(homogeneous(P[1], S)) @ homogeneous(q_ref, S) @ homogeneous(P[0], S)
        q = params_of(T, S)
        got = [d2(u, v, q, m, psf, sig) for m in (False, True)]
        print(f"   rendering {k}: scales {np.exp(P[0, 3]):.3f} {np.exp(P[1, 3]):.3f}  plain "
              f"{got[0]:.4f}  matched {got[1]:.4f}")  # fmt: skip


if __name__ == "__main__":
    main()
