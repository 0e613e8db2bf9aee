"""An executor of the provider's that is never asked to run anything (unit tests of offers,
quotes and confirms): only what it offers is read."""

from __future__ import annotations

from engine.domain.spec import FRAMEWORKS


class FakeIdleExecutor:
    def frameworks(self) -> tuple[str, ...]:
        return FRAMEWORKS
