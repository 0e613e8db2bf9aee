"""The one error type that crosses the facade.

Every failure a user can cause or fix is an ``EngineError`` with a stable ``code`` (for scripts)
and a message that says what was wrong and how to fix it (for people). It survives the control
socket unchanged, so the CLI prints the same line whether the engine is embedded or a daemon.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class FieldProblem:
    """One thing wrong with one input field; the TUI shows it under that field."""

    field: str
    message: str


class EngineError(Exception):
    """A failure with a machine-readable code and a human message."""

    def __init__(self, code: str, message: str, problems: tuple[FieldProblem, ...] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.problems = problems

    def to_wire(self) -> dict[str, object]:
        return {
            "code": self.code,
            "message": self.message,
            "problems": [{"field": p.field, "message": p.message} for p in self.problems],
        }

    @classmethod
    def from_wire(cls, data: object) -> EngineError:
        if not isinstance(data, dict):
            return cls("protocol", f"malformed error reply: {data!r:.200}")
        raw_problems = data.get("problems") or []
        problems = tuple(
            FieldProblem(str(p.get("field", "")), str(p.get("message", "")))
            for p in raw_problems
            if isinstance(p, dict)
        )
        return cls(str(data.get("code", "error")), str(data.get("message", "")), problems)


@dataclass(frozen=True)
class ValidationReport:
    """All the problems found in one input, not just the first."""

    problems: tuple[FieldProblem, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not self.problems

    def for_field(self, name: str) -> list[str]:
        return [p.message for p in self.problems if p.field == name]

    def raise_if_failed(self, code: str = "invalid") -> None:
        if self.problems:
            message = "; ".join(p.message for p in self.problems)
            raise EngineError(code, message, self.problems)
