"""The resources room (issue 12): ``resource list`` and the commands that define what a
provider sells. Every change is checked by engine/domain/specs.py (the validator the CLI
and the TUI use too), saved atomically, and then re-advertised (``changed``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import msgspec

from engine import api
from engine.commands import Handlers
from engine.context import NodeContext
from engine.domain import specs as rs
from engine.errors import EngineError, FieldProblem
from engine.resources.capacity import onboarded_capacity
from engine.resources.spec_file import ResourceFile

T = TypeVar("T", api.ResourceSpec, api.CustomResource, api.Pool, api.Group)


class ResourceRoom:
    def __init__(
        self,
        ctx: NodeContext,
        full: Callable[[], api.Capacity],
        changed: Callable[[], None] = lambda: None,
    ) -> None:
        self.ctx = ctx
        self._full = full
        self._changed = changed
        self.file = ResourceFile(ctx.paths.resources_file)

    def commands(self) -> Handlers:
        return {
            api.ResourceList: self._list,
            api.SpecAdd: self._spec_add,
            api.SpecRemove: self._spec_remove,
            api.CheckSpec: self._check,
            api.CustomAdd: self._custom_add,
            api.CustomRemove: self._custom_remove,
            api.PoolAdd: self._pool_add,
            api.PoolRemove: self._pool_remove,
            api.GroupAdd: self._group_add,
            api.GroupRemove: self._group_remove,
        }

    def onboarded(self) -> api.Capacity:
        return onboarded_capacity(self.ctx.store.get_onboarding(), self._full())

    def listing(self, book: rs.ResourceBook | None = None) -> api.Resources:
        book = book if book is not None else self.file.load()
        onboarded = self.onboarded()
        specs, defaults = rs.in_force(
            book, self.ctx.settings.jobs.price_units(), len(onboarded.gpus)
        )
        return api.Resources(
            system=self._full(),
            onboarded=onboarded,
            customs=book.customs,
            specs=specs,
            pools=book.pools,
            groups=book.groups,
            defaults=defaults,
            file=str(self.file.path),
        )

    def _save(self, book: rs.ResourceBook) -> api.Resources:
        self.file.save(book)
        self._changed()
        listing = self.listing(book)
        self.ctx.emit(api.ResourcesChanged(at=time.time(), resources=listing))
        return listing

    async def _list(self, command: api.ResourceList) -> api.Resources:
        return self.listing()

    async def _check(self, command: api.CheckSpec) -> api.Validation:
        book = self.file.load()
        problems = rs.check_spec(
            command.spec,
            self.onboarded(),
            book.customs,
            book.pools,
            specs=book.specs,
            replace=command.replace,
        )
        return api.Validation(
            ok=not problems,
            problems=tuple(api.ProblemItem(field=p.field, message=p.message) for p in problems),
        )

    async def _spec_add(self, command: api.SpecAdd) -> api.Resources:
        book = self.file.load()
        _raise(
            rs.check_spec(
                command.spec,
                self.onboarded(),
                book.customs,
                book.pools,
                specs=book.specs,
                replace=command.replace,
            )
        )
        return self._save(msgspec.structs.replace(book, specs=_put(book.specs, command.spec)))

    async def _spec_remove(self, command: api.SpecRemove) -> api.Resources:
        book = self.file.load()
        return self._save(
            msgspec.structs.replace(book, specs=_without(book.specs, command.name, "spec"))
        )

    async def _custom_add(self, command: api.CustomAdd) -> api.Resources:
        book = self.file.load()
        _raise(rs.check_custom(command.custom, self._full(), book.customs, replace=command.replace))
        return self._save(msgspec.structs.replace(book, customs=_put(book.customs, command.custom)))

    async def _custom_remove(self, command: api.CustomRemove) -> api.Resources:
        book = self.file.load()
        users = [s.name for s in book.specs if s.gpu_resource == command.name]
        _in_use(users, "custom resource", command.name, "spec")
        return self._save(
            msgspec.structs.replace(
                book, customs=_without(book.customs, command.name, "custom resource")
            )
        )

    async def _pool_add(self, command: api.PoolAdd) -> api.Resources:
        book = self.file.load()
        _raise(rs.check_pool(command.pool, book.groups, book.pools, replace=command.replace))
        return self._save(msgspec.structs.replace(book, pools=_put(book.pools, command.pool)))

    async def _pool_remove(self, command: api.PoolRemove) -> api.Resources:
        book = self.file.load()
        _in_use(
            [s.name for s in book.specs if s.pool == command.name], "pool", command.name, "spec"
        )
        return self._save(
            msgspec.structs.replace(book, pools=_without(book.pools, command.name, "pool"))
        )

    async def _group_add(self, command: api.GroupAdd) -> api.Resources:
        book = self.file.load()
        _raise(rs.check_group(command.group, book.groups, book.pools, replace=command.replace))
        return self._save(msgspec.structs.replace(book, groups=_put(book.groups, command.group)))

    async def _group_remove(self, command: api.GroupRemove) -> api.Resources:
        book = self.file.load()
        users = [p.name for p in book.pools if command.name in p.groups]
        _in_use(users, "group", command.name, "pool")
        return self._save(
            msgspec.structs.replace(book, groups=_without(book.groups, command.name, "group"))
        )


def commands(
    ctx: NodeContext, full: Callable[[], api.Capacity], changed: Callable[[], None]
) -> Handlers:
    return ResourceRoom(ctx, full, changed).commands()


def _raise(problems: Sequence[FieldProblem]) -> None:
    if problems:
        raise EngineError("invalid", "; ".join(p.message for p in problems), tuple(problems))


def _put(items: tuple[T, ...], item: T) -> tuple[T, ...]:
    """``item`` in place of the one of its name, or added at the end."""
    replaced = [item if i.name == item.name else i for i in items]
    if item not in replaced:
        replaced.append(item)
    return tuple(replaced)


def _without(items: tuple[T, ...], name: str, what: str) -> tuple[T, ...]:
    kept = tuple(i for i in items if i.name != name)
    if len(kept) == len(items):
        raise EngineError("not_found", f"no {what} named {name!r} (`nunet-tui resource list`)")
    return kept


def _in_use(users: list[str], what: str, name: str, user: str) -> None:
    if users:
        raise EngineError(
            "in_use",
            f"the {what} {name!r} is used by {user} {', '.join(users)}: "
            f"remove or change that {user} first",
        )
