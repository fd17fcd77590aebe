"""The CUDA build of the per-pair kappa^max search (ia_stages.kmax.cuda) against the CPU build.

Both are compiled from the same scalar source (ia_stages.kmax.refine_kernels.SHARED). Without a GPU
the CUDA kernel runs in numba's CUDA simulator, which must be switched on before numba.cuda is first
imported, so each check runs in a fresh Python process and leaves this test process alone. A second
check compiles the kernel to PTX for a real GPU (sm_90) where NVVM is installed: the simulator runs
the Python source, and only the compiler sees CUDA typing errors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

SIMULATED = textwrap.dedent(
    """
    import json
    import numpy as np
    from numba import config
    from ia_stages.core.smoothing import normalize, smooth
    from ia_stages.kmax import SearchSettings
    from ia_stages.kmax.cuda import search_pairs_cuda
    from ia_stages.kmax.refine import pair_images, search_pairs
    from ia_stages.kmax.refine import _half_resolution_pair, _pair_layout, _policy, _search_targets

    assert config.ENABLE_CUDASIM
    rng = np.random.default_rng(7)
    X = np.zeros((4, 16, 16))
    X[0, 3:12, 5:9] = 1.0
    X[0, 3:6, 5:13] = 1.0
    X[1, 4:13, 3:10] = 1.0
    X[1, 7:10, 6:8] = 0.0
    X[2, 2:14, 7:9] = 1.0
    X[2, 11:14, 3:13] = 1.0
    X[3] = X[0].T[::-1]
    X = X[:, 2:14, 2:14]  # 12 x 12: the simulator runs every CUDA thread in Python
    U = normalize(smooth(X, 1.0))
    ii, jj = np.array([0, 1]), np.array([3, 2])
    starts = np.concatenate(
        [rng.uniform(-np.pi, np.pi, (2, 2, 1)), rng.uniform(-2, 2, (2, 2, 2))], -1
    )
    starts = np.concatenate([starts, starts[:, :1]], 1)  # the scan repeats its best peak
    out = []
    for beta, s in (
        (5.0, SearchSettings(coarse_iters=0, prune_kappa=0.0)),  # every start, full resolution
        (20.0, SearchSettings()),  # half resolution, pruning, floored targets
        (60.0, SearchSettings()),  # most starts ruled out early
        (20.0, SearchSettings(interpolation="keys")),  # the other taps, on the raw pixels
    ):
        cpu = search_pairs(
            _pair_layout(U, U, 1.0, s), ii, jj, starts, beta, _policy(s), s.coarse_iters
        )
        # the GPU layout (float32 moving images, not packed); numpy arrays are the
        # simulator's device arrays
        half = _half_resolution_pair(U, U, 1.0, s)
        gpu_images = pair_images(
            U, U, half, _search_targets(U, s), packed=False, interpolation=s.interpolation
        ).to(np)  # as kappa_max copies them to the GPU
        gpu = search_pairs_cuda(gpu_images, ii, jj, starts, beta, _policy(s), s.coarse_iters)
        out.append(
            {
                "beta": beta,
                "interpolation": s.interpolation,
                "cost": float(np.abs(cpu[1] - gpu[1]).max()),
                "params": float(np.abs(cpu[0] - gpu[0]).max()),
                "spread": float(np.ptp(cpu[1])),
            }
        )
    # the joint search of plain and mirror-image candidates: V[4] is the mirror image of U[1],
    # so pair (1, 4) is won by a mirror candidate
    s = SearchSettings()
    W = np.concatenate([U, U[1:2, :, ::-1]])
    i3, j3 = np.array([0, 1, 1]), np.array([3, 2, 4])
    start3 = np.concatenate([starts, np.zeros((1, 3, 3))])
    start3 = np.concatenate([start3, start3[:, ::-1]], 1)  # 3 plain, then 3 mirror candidates
    won = np.zeros((2, 3), bool)
    cpu = search_pairs(_pair_layout(U, W, 1.0, s, mirror=True), i3, j3, start3, 20.0,
                       _policy(s), s.coarse_iters, 3, won[0])  # fmt: skip
    gpu_images = pair_images(
        U, W, _half_resolution_pair(U, W, 1.0, s), _search_targets(U, s), packed=False,
        interpolation=s.interpolation, mirror=True,
    ).to(np)  # fmt: skip
    gpu = search_pairs_cuda(gpu_images, i3, j3, start3, 20.0, _policy(s), s.coarse_iters, 3,
                            won[1])  # fmt: skip
    assert won[0, 2] and (won[0] == won[1]).all(), won
    out.append({"beta": 20.0, "interpolation": "mirror", "spread": float(np.ptp(cpu[1])),
                "cost": float(np.abs(cpu[1] - gpu[1]).max()),
                "params": float(np.abs(cpu[0] - gpu[0]).max())})
    # the scan's peak picking, compiled from the same code
    from ia_stages.kmax.cuda import pair_peaks_cuda
    from ia_stages.kmax.rings import pair_peaks

    M, n_o = 36, 4
    angles = np.arange(M) * 2 * np.pi / M
    coef = rng.normal(size=(3, 5, n_o, 4, 2))
    k = np.arange(1, 5)[:, None]
    scores = coef[..., 0, None] * np.cos(k * angles) + coef[..., 1, None] * np.sin(k * angles)
    scores = scores.sum(-2).astype(np.float32)  # (3, 5, n_o, M)
    ii, jj = np.repeat(np.arange(3), 5), np.tile(np.arange(5), 3)
    t1, o1 = pair_peaks(scores, ii, jj, 3)
    t2, o2 = pair_peaks_cuda(scores, ii, jj, 3)
    out.append({"peaks": float(np.abs(t1 - t2).max()), "centres": int((o1 != o2).sum())})
    # ... and the joint peaks over angle and a 13-centre lattice
    from ia_stages.kmax.cuda import pair_joint_peaks_cuda
    from ia_stages.kmax.rings import pair_joint_peaks
    from ia_stages.kmax.search import centre_offsets, lattice_neighbours

    nbr = lattice_neighbours(centre_offsets(2.0, 2))
    coef = rng.normal(size=(2, 3, len(nbr), 4, 2))
    scores = coef[..., 0, None] * np.cos(k * angles) + coef[..., 1, None] * np.sin(k * angles)
    scores = scores.sum(-2).astype(np.float32)  # (2, 3, 13, M)
    ii, jj = np.repeat(np.arange(2), 3), np.tile(np.arange(3), 2)
    t1, o1 = pair_joint_peaks(scores, ii, jj, 5, nbr)
    t2, o2 = pair_joint_peaks_cuda(scores, ii, jj, 5, nbr)
    out.append({"peaks": float(np.abs(t1 - t2).max()), "centres": int((o1 != o2).sum())})
    # the candidates mode's lattice scan: ring spectra of the images above about a lattice
    from ia_stages.kmax.cuda import lattice_pair_scores_cuda
    from ia_stages.kmax.polar import angle_synthesis, centroids, scan_spectra
    from ia_stages.kmax.rings import lattice_pair_scores

    M = 16
    m = centroids(U)
    A = scan_spectra(U, m[None], M)[:, :, 0]
    B = scan_spectra(U, m[None] + centre_offsets(1.0, 1)[:, None], M)
    ia, jb = np.array([0, 1, 2, 3, 0]), np.array([3, 2, 1, 0, 0])
    E = angle_synthesis(M)
    cpu = np.empty((ia.size, B.shape[2], M), dtype=np.float32)
    gpu = np.empty_like(cpu)
    lattice_pair_scores(A, B, ia, jb, E, cpu)
    lattice_pair_scores_cuda(A, B, ia, jb, E, gpu)
    out.append({"lattice": float(np.abs(cpu - gpu).max() / np.abs(cpu).max()),
                "spread": float(np.ptp(cpu))})
    print(json.dumps(out))
    """
)


def test_a_layout_copied_to_the_device_keeps_every_resolution_in_its_role():
    """:meth:`PairImages.to` (kappa_max's copy of the layout to the GPU) keeps full, half,
    search and tail where they were, and the interpolation."""
    from ia_stages.kmax.refine import pair_images

    rng = np.random.default_rng(0)
    U, V = rng.random((3, 8, 8)), rng.random((2, 8, 8))
    half = (rng.random((3, 4, 4)), rng.random((2, 4, 4)))
    search = np.where(U > 0.5, U, 0.0)
    layout = pair_images(U, V, half, search, packed=False, interpolation="bspline")
    moved = layout.to(np)
    assert moved.interpolation == "bspline"
    for name in ("full", "half", "search", "tail"):
        for a, b in zip(getattr(layout, name).arrays(), getattr(moved, name).arrays(), strict=True):
            np.testing.assert_array_equal(a, b)
    assert layout.search.t.size + layout.tail.t.size == layout.full.t.size
    assert layout.search.t.size != layout.tail.t.size  # the roles are distinguishable


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_cuda_kernel_in_the_simulator_equals_the_cpu_kernel():
    """Same pixels (float32 moving images, or their float32 B-spline coefficients), same
    float64 sums, the same taps (both interpolations): the CUDA build reports the CPU build's
    costs and transforms to 1e-9 (the CPU's fastmath only reorders its sums),
    the CUDA peak picking (envelope and joint) the CPU's peaks and centres, and the CUDA
    lattice scan of chosen pairs the CPU's scores (float32 results of float64 sums)."""
    proc = _run(SIMULATED, NUMBA_ENABLE_CUDASIM="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == 8
    lattice = results.pop()
    assert lattice["spread"] > 1e-3 and lattice["lattice"] < 1e-6, lattice
    for _ in range(2):  # the joint peaks, then the envelope's
        peaks = results.pop()
        assert peaks["peaks"] < 1e-12 and peaks["centres"] == 0, peaks
    for r in results:
        assert r["spread"] > 1e-3  # the pairs differ: the comparison is not of constants
        assert r["cost"] < 1e-9, r
        assert r["params"] < 1e-7, r


PTX = textwrap.dedent(
    """
    import types
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda, types as nt
    from ia_stages.kmax.cuda import (
        _joint_peaks_kernel, _kernel, _lattice_kernel, _nearest_kernel, _peaks_kernel,
    )

    # no GPU here: compile the device functions for compute capability 9.0 (H100 / H200)
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))
    f64, i64 = nt.float64, nt.int64

    def a(dtype, ndim):
        return nt.Array(dtype, ndim, "C")

    res = [a(i64, 1), a(f64, 1), a(f64, 1), a(f64, 1), a(nt.float32, 2), a(f64, 1), a(f64, 1),
           a(i64, 1)]
    sig = (a(i64, 1), a(i64, 1), a(f64, 3), i64, i64, *res * 4, i64, f64, i64, *[f64] * 11,
           nt.boolean, nt.UniTuple(f64, 16), a(f64, 2), a(f64, 2), a(f64, 3), a(f64, 4),
           a(f64, 3), a(i64, 2), a(f64, 4), a(f64, 2), a(f64, 1), a(nt.boolean, 1))
    ptx, _ = cuda.compile_ptx(_kernel().py_func, sig, cc=(9, 0))
    peaks_sig = (nt.Array(nt.float32, 4, "C"), a(i64, 1), a(i64, 1), i64, a(f64, 2), a(f64, 2),
                 a(i64, 2), a(f64, 2), a(i64, 2))
    ptx_peaks, _ = cuda.compile_ptx(_peaks_kernel().py_func, peaks_sig, cc=(9, 0))
    joint_sig = (nt.Array(nt.float32, 4, "C"), a(i64, 1), a(i64, 1), i64, a(i64, 2), a(f64, 2),
                 a(i64, 2), a(i64, 2), a(f64, 2), a(i64, 2))
    ptx_joint, _ = cuda.compile_ptx(_joint_peaks_kernel().py_func, joint_sig, cc=(9, 0))
    lattice_sig = (a(f64, 3), a(f64, 4), a(i64, 1), a(i64, 1), a(f64, 2), a(f64, 2),
                   nt.Array(nt.float32, 3, "C"))
    ptx_lattice, _ = cuda.compile_ptx(_lattice_kernel().py_func, lattice_sig, cc=(9, 0))
    f32 = nt.float32
    nearest_sig = (a(f32, 2), a(f32, 1), i64, a(f32, 2), a(i64, 2), a(i64, 2))
    ptx_nearest, _ = cuda.compile_ptx(_nearest_kernel().py_func, nearest_sig, cc=(9, 0))
    ptxs = (ptx, ptx_peaks, ptx_joint, ptx_lattice, ptx_nearest)
    print(sum(len(p) for p in ptxs), all(".entry" in p for p in ptxs))
    """
)


def _nvvm_available() -> bool:
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        load_nvidia_dynamic_lib("nvvm")
        load_nvidia_dynamic_lib("nvrtc")
    except Exception:
        return False
    return True


NEAREST = textwrap.dedent(
    """
    import json
    import numpy as np
    from numba import config
    from ia_stages.kmax.cuda import nearest_of_block_cuda
    from ia_stages.kmax.features import feature_neighbours
    from ia_stages.kmax.selection import nearest_of_block

    assert config.ENABLE_CUDASIM
    rng = np.random.default_rng(4)
    F = rng.normal(size=(40, 5)).astype(np.float32)
    F[[3, 8, 21]] = F[5]  # equal distances: ties
    sq = (F**2).sum(1)
    product = F[10:30] @ F.T
    cpu = np.empty((20, 7), dtype=np.int64)
    gpu = np.empty_like(cpu)
    nearest_of_block(product, sq, 10, cpu)
    nearest_of_block_cuda(product, sq, 10, gpu)
    whole = feature_neighbours(F, 7)
    print(json.dumps({"same": bool((cpu == gpu).all()), "rows": bool((cpu == whole[10:30]).all())}))
    """
)


def test_cuda_nearest_in_feature_space_equals_the_cpu_build():
    """The feature-space selection's CUDA build (one thread per row, the same scalar
    function) lists the CPU build's neighbours, ties included, in the simulator."""
    proc = _run(NEAREST, NUMBA_ENABLE_CUDASIM="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == {"same": True, "rows": True}


@pytest.mark.slow  # compiles every kernel for a real GPU's instruction set
@pytest.mark.skipif(not _nvvm_available(), reason="NVVM / NVRTC not installed (pip: nvidia-nvvm)")
def test_cuda_kernel_compiles_to_ptx_for_a_real_gpu():
    proc = _run(PTX)
    assert proc.returncode == 0, proc.stderr[-3000:]
    length, has_entry = proc.stdout.split()[-2:]
    assert int(length) > 10_000 and has_entry == "True"


def test_the_cuda_module_imports_on_a_numpy_without_row_stack():
    """numpy 2.5 removed ``np.row_stack``, which numba-cuda 0.30 overloads at import: the
    H200 machine's image failed there until kmax.cuda restored it (as ``np.vstack``)."""
    code = (
        "import numpy as np\n"
        "import ia_stages.kmax.search\n"  # the CPU side, with the numpy it was built for
        "if hasattr(np, 'row_stack'):\n"
        "    del np.row_stack\n"
        "from ia_stages.kmax import cuda\n"
        "assert np.row_stack is np.vstack\n"
        "print('ok')\n"
    )
    proc = _run(code, NUMBA_ENABLE_CUDASIM="1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("ok")
