"""``ia-stages cluster PATH --out DIR``: the pipeline on one folder or stack of the user's images.

Writes a config for one ``images`` dataset into ``DIR/config.yaml`` (the default config is
never touched), runs the same Snakemake workflow through its API with ``DIR`` as working
directory (so ``DIR/results/`` holds every store and log, and a rerun does only what changed),
and copies ``clusters.csv`` and the gallery to the top of ``DIR``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from ia_stages.pipeline.config import SNAKEFILE, ConfigError, validate_config

DATASET = "images"


def images_config(
    path: str | Path,
    canvas: int | None = None,
    downsample: int = 1,
    invert: bool = False,
    labels: str | Path | None = None,
    max_images: int | None = None,
    beta: float | None = None,
    kernel_sigma: float | None = None,
    threshold: float | None = None,
    iterations: int = 2,
    mean_steps: int = 20,
    mean_images: int | None = 24,
    block_size: int = 256,
    seed: int = 0,
    backend: str = "auto",
    group: str = "se2",
    mirror: bool = False,
) -> dict:
    """The workflow config for one ``images`` dataset: IA only, no paper figures or benchmark.

    Paths are made absolute, since the workflow runs in the output folder. ``mean_steps`` and
    ``mean_images`` are ``ia.mean.steps`` and ``ia.mean.max_images`` (the cost of a mean is
    linear in both; 24 as in the default config).
    """
    ds: dict = {
        "kind": "images",
        "path": str(Path(path).resolve()),
        "canvas": canvas,
        "downsample": downsample,
        "invert": invert,
        "labels": str(Path(labels).resolve()) if labels else None,
        "max_images": max_images,
    }
    for key, value in (("beta", beta), ("kernel_sigma", kernel_sigma)):
        if value is not None:
            ds[key] = value
    if group != "se2" or mirror:
        ds["group"] = {"name": group, "mirror": mirror}
    if threshold is not None:
        ds["readout_threshold"] = threshold
    return {
        "seed": seed,
        "backend": backend,
        "block_size": block_size,
        "datasets": {DATASET: ds},
        "ia": {
            "datasets": [DATASET],
            "iterations": iterations,
            "mean": {"steps": mean_steps, "max_images": mean_images},
        },
        "ka": {"datasets": []},
        "benchmark": {"datasets": []},
        "figures": {"blobs": None, "shapes": None, "mean_trace": {"dataset": None}},
    }


def targets(dataset: str = DATASET) -> list[str]:
    """What the one command asks the workflow for."""
    return [
        f"results/{dataset}/clusters.csv",
        f"results/figures/{dataset}_classes.png",
        f"results/figures/{dataset}_stability.png",
        "results/tables/summary.csv",
    ]


def run(
    config: dict,
    out: str | Path,
    cores: int = 2,
    snakefile: str | Path = SNAKEFILE,
    report: bool = False,
) -> dict[str, Path]:
    """Validate ``config``, write it to ``out/config.yaml``, run the workflow in ``out``.

    Returns the paths of what it wrote at the top of ``out``: clusters.csv, classes.png,
    stability.png, summary.csv and (``report``) report.html. A bad config raises
    :class:`ConfigError` before anything is written.
    """
    from ia_stages.pipeline.stages.common import InputError

    snakefile = Path(snakefile)
    if not snakefile.is_file():
        raise InputError(f"{snakefile}: Snakefile not found (give --snakefile)")
    validate_config(config)  # one-line ConfigError before anything is written
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    cfg_path = out / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(config, sort_keys=False))
    _snakemake(snakefile, out, cfg_path, targets(), cores, report)
    copies = {
        "clusters.csv": out / targets()[0],
        "classes.png": out / targets()[1],
        "stability.png": out / targets()[2],
        "summary.csv": out / targets()[3],
    }
    written = {}
    for name, src in copies.items():
        shutil.copyfile(src, out / name)
        written[name] = out / name
    if report:
        written["report.html"] = out / "report.html"
    return written


def _snakemake(
    snakefile: Path, workdir: Path, configfile: Path, goals: list[str], cores: int, report: bool
) -> None:
    from snakemake.api import SnakemakeApi
    from snakemake.report.html_reporter import ReportSettings
    from snakemake.settings.types import (
        ConfigSettings,
        DAGSettings,
        ExecutionSettings,
        OutputSettings,
        ResourceSettings,
        StorageSettings,
    )

    from ia_stages.pipeline.stages.common import InputError

    def workflow(api):
        return api.workflow(
            resource_settings=ResourceSettings(cores=cores),
            config_settings=ConfigSettings(configfiles=[configfile]),
            storage_settings=StorageSettings(),
            snakefile=snakefile,
            workdir=workdir,
        )

    try:
        with SnakemakeApi(OutputSettings(quiet={"progress", "rules", "host"})) as api:
            dag = workflow(api).dag(DAGSettings(targets=goals))
            dag.execute_workflow(executor="local", execution_settings=ExecutionSettings())
        if report:
            with SnakemakeApi(OutputSettings(quiet={"progress", "rules", "host"})) as api:
                workflow(api).dag(DAGSettings(targets=goals)).create_report(
                    reporter="html", report_settings=ReportSettings(path=workdir / "report.html")
                )
    except (ConfigError, InputError):
        raise
    except Exception as err:  # Snakemake reports a failed job as one of many exception kinds
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InputError(
            f"the workflow stopped ({first}); see the logs in {workdir / 'results' / 'logs'}"
        ) from None
