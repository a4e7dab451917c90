"""Writing a table as CSV (long form, every column) and Markdown (the readable layout)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dmg_domainbed.reporting.markdown import markdown_table


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
