"""The example jobs the submit form offers one key away (F1, F2, ...): the app's presets.

``nunet-tui demo`` serves examples/jobs/ over HTTP and hands the app its description
(``Sandbox.describe()``); the app loads the presets once (``NunetApp.presets``) and the
form shows them. Nothing here imports the command line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from engine.domain.spec import JobSpec, load_job_file
from engine.errors import EngineError

MAX_PRESETS = 9  # F1 to F9


def examples_dir() -> Path:
    # Package data (nunet_tui/examples links to the repository's examples/ in a checkout), so
    # a wheel or pipx install has them too.
    return Path(str(resources.files("nunet_tui") / "examples" / "jobs")).resolve()


EXAMPLES = examples_dir()


@dataclass(frozen=True)
class Preset:
    """One example job (examples/jobs/NAME/job.toml, served by the demo)."""

    name: str
    spec: JobSpec | None
    error: str = ""


def load_presets(examples: Mapping[str, Any] | None) -> list[Preset]:
    """The example jobs of ``Sandbox.describe()``: each job.toml with its relative script URL
    resolved against ``scripts_url + name + "/"``."""
    if not examples:
        return []
    base = str(examples.get("scripts_url") or "")
    folder = Path(str(examples.get("examples_dir") or EXAMPLES))
    names = examples.get("examples") or {}
    presets: list[Preset] = []
    for name in sorted(names)[:MAX_PRESETS]:
        try:
            spec = load_job_file(folder / name / "job.toml", base_url=f"{base}{name}/")
        except EngineError as exc:
            presets.append(Preset(name, None, exc.message))
        else:
            presets.append(Preset(name, spec))
    return presets
