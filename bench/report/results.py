"""The inputs of the generated docs: the result JSONs of one folder, committed assets, the product's defaults and
the :mod:`bench.all` job that regenerates each result file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
DOC = ROOT / "docs" / "benchmarks.md"
README = ROOT / "README.md"


class Results:
    """The result files of one folder, loaded on first use; remembers which files were read."""

    def __init__(self, folder: Path | str = RESULTS):
        self.folder = Path(folder)
        self.used: set[str] = set()
        self._cache: dict[str, Any] = {}

    def __call__(self, name: str) -> Any:
        """The parsed ``<folder>/<name>.json``. Raises FileNotFoundError when it does not exist."""
        if name not in self._cache:
            path = self.folder / f"{name}.json"
            self._cache[name] = json.loads(path.read_text(encoding="utf-8"))
        self.used.add(f"{name}.json")
        return self._cache[name]

    def available(self) -> list[str]:
        """File names of every result JSON in the folder, sorted."""
        return sorted(p.name for p in self.folder.glob("*.json"))


def asset(path: str) -> Any:
    """A committed JSON next to a model (``path`` from the repository root, such as
    ``assets/codec_tts/stages_before.json``), parsed. Raises FileNotFoundError when it is missing."""
    return json.loads((ROOT / path).read_text(encoding="utf-8"))


def defaults():
    """The product's defaults (engine.config), to mark the default row of a table."""
    from engine.config import Config

    return Config()


def job_for(output: str):
    """The :mod:`bench.all` job that writes ``bench/results/<output>``."""
    from bench.all import JOBS

    for j in JOBS:
        if j.output == output:
            return j
    raise KeyError(f"no job in bench/all.py writes {output}")
