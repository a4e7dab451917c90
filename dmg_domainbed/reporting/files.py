"""Writing report files: tables as CSV and Markdown into a safe folder (figures: PNG files
written by :func:`dmg_domainbed.drawing.save`)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from dmg_domainbed.errors import UserError
from dmg_domainbed.folders import check_creatable
from dmg_domainbed.reporting.tables import markdown_table


def check_output_dir(output_dir: Path, *inputs: Path) -> Path:
    """``output_dir``, unless it lies inside a folder the report reads (which stays untouched),
    cannot be created, or holds a file this user may not overwrite (an earlier report's)."""
    check_creatable(output_dir, "--output_dir")
    resolved = output_dir.resolve()
    for folder in inputs:
        if resolved == folder.resolve() or folder.resolve() in resolved.parents:
            raise UserError(
                f"output folder '{output_dir}' lies inside the input folder '{folder}', which "
                "is only read. Choose an --output_dir outside it."
            )
    if output_dir.is_dir():
        for path in output_dir.iterdir():
            if path.is_file() and not os.access(path, os.W_OK):
                raise UserError(
                    f"--output_dir '{output_dir}' holds '{path.name}', which this user may not "
                    "overwrite. Give another folder, or make that file writable."
                )
    return output_dir


def write_table(
    long: pd.DataFrame,
    sections: list[tuple[str, pd.DataFrame]],
    output_dir: Path,
    stem: str,
    index_label: str = "",
) -> list[Path]:
    """``<stem>.csv`` from ``long``; ``<stem>.md`` with one titled Markdown table per section."""
    output_dir.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = output_dir / f"{stem}.csv", output_dir / f"{stem}.md"
    long.to_csv(csv_path, index=False)
    md_path.write_text(
        "\n".join(f"{title}\n\n{markdown_table(wide, index_label)}" for title, wide in sections)
    )
    return [csv_path, md_path]
