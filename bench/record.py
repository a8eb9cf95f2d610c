"""What every benchmark does with its figures: add them, under its own key, to the results file it was given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["record"]


def record(json_path: str | None, key: str, row: Any) -> None:
    """Put ``row`` under ``key`` in the JSON file ``json_path`` (made if missing; other keys kept); None: nothing."""
    if not json_path:
        return
    path = Path(json_path)
    data = json.loads(path.read_text()) if path.exists() else {}
    data[key] = row
    path.write_text(json.dumps(data, indent=1) + "\n")
