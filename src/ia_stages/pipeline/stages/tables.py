"""Stage ``tables``: the summary table over datasets (CSV and Markdown)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ia_stages.pipeline.store import write_text_atomic


def read_csvs(paths: list[str | Path], what: str) -> pd.DataFrame:
    """Concatenate CSV files; an unreadable one raises ValueError naming it and ``what`` it is."""
    frames = []
    for path in paths:
        try:
            frames.append(pd.read_csv(path))
        except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
            raise ValueError(f"{path}: unreadable {what} file ({err})") from None
    return pd.concat(frames, ignore_index=True)


def run(metrics: list[str | Path], out_csv: str | Path, out_md: str | Path) -> pd.DataFrame:
    """Concatenate per-dataset metrics and write the table."""
    df = read_csvs(metrics, "metrics")
    write_text_atomic(df.to_csv(index=False, float_format="%.6g"), out_csv)
    shown = df.rename(
        columns={
            "clusters_found": "clusters",
            "block_diagonality": "block-diag",
            "max_within_class_manifold_distance": "max d(S_i,S_j)",
            "wall_seconds": "wall s",
        }
    )
    md = [
        "# Invariant Attention (IA) vs kernel attention (KA)",
        "",
        "Per dataset, method and iteration t (t = 0 is the input data). ACC uses Hungarian",
        "matching; clusters come from the read-out without the number of classes; block-diag is",
        "the share of the weights W computed from the iteration-t features that stays inside the",
        "true classes; max d(S_i,S_j) is the largest within-class manifold distance (eq. 3.2) of",
        "the iteration-t features; wall s is the cumulative compute time up to iteration t.",
        "",
        shown.to_markdown(index=False, floatfmt=".4g"),
        "",
    ]
    write_text_atomic("\n".join(md), out_md)
    return df
