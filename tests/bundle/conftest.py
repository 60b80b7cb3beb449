"""The bundle's YAML, loaded once: databricks.yml and every resources/*.yml it includes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Bundle:
    root: dict[str, Any]
    files: dict[Path, dict[str, Any]]
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    pipelines: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def variables(self) -> dict[str, dict[str, Any]]:
        return dict(self.root.get("variables") or {})

    @property
    def targets(self) -> dict[str, dict[str, Any]]:
        return dict(self.root.get("targets") or {})


def load_bundle(root: Path = ROOT) -> Bundle:
    main = yaml.safe_load((root / "databricks.yml").read_text())
    files: dict[Path, dict[str, Any]] = {root / "databricks.yml": main}
    for pattern in main.get("include") or []:
        for path in sorted(root.glob(pattern)):
            files[path] = yaml.safe_load(path.read_text()) or {}
    bundle = Bundle(root=main, files=files)
    for path, doc in files.items():
        resources = doc.get("resources") or {}
        for name, body in (resources.get("jobs") or {}).items():
            assert name not in bundle.jobs, f"job {name} defined twice ({path})"
            bundle.jobs[name] = body
        for name, body in (resources.get("pipelines") or {}).items():
            assert name not in bundle.pipelines, f"pipeline {name} defined twice ({path})"
            bundle.pipelines[name] = body
    return bundle


@pytest.fixture(scope="session")
def bundle() -> Bundle:
    return load_bundle()
