"""What a provider sells (issue 12): custom resources, resource specs priced per machine-hour,
pools of consumers who may use them, and the commands that edit them.

Data here; the rules (``check_spec`` and friends) and the file they live in are in
engine/domain/specs.py (the file: engine/resources/spec_file.py); the records themselves in
engine/domain/offers.py; the handlers in engine/resources/commands.py. Every amount is an
``int`` in NTX base units (1 NTX = 1_000_000).
"""

from __future__ import annotations

from engine.api.base import Command, Event, Record
from engine.api.node import Capacity, Validation
from engine.domain.offers import CustomResource, Group, Pool, ResourceSpec


class Resources(Record, frozen=True):
    """A provider's resources as ``resource list`` shows them.

    ``specs``: the ones in force (NuNet's Low/Moderate/High tiers when ``defaults``, i.e. the
    provider defined none); ``system``: what detection found; ``onboarded``: what bounds every
    spec; ``file``: where the definitions are kept."""

    system: Capacity
    onboarded: Capacity
    customs: tuple[CustomResource, ...] = ()
    specs: tuple[ResourceSpec, ...] = ()
    pools: tuple[Pool, ...] = ()
    groups: tuple[Group, ...] = ()
    defaults: bool = True
    file: str = ""


class ResourceList(Command, tag="resource_list", frozen=True):
    reply = Resources


class SpecAdd(Command, tag="spec_add", frozen=True):
    """Define a spec (``replace``: edit the one of that name)."""

    reply = Resources
    spec: ResourceSpec
    replace: bool = False


class SpecRemove(Command, tag="spec_remove", frozen=True):
    reply = Resources
    name: str


class CheckSpec(Command, tag="spec_check", frozen=True):
    """Validate a spec without saving it (a form as you type, over a daemon): check_spec."""

    reply = Validation
    spec: ResourceSpec
    replace: bool = False


class CustomAdd(Command, tag="custom_add", frozen=True):
    reply = Resources
    custom: CustomResource
    replace: bool = False


class CustomRemove(Command, tag="custom_remove", frozen=True):
    reply = Resources
    name: str


class PoolAdd(Command, tag="pool_add", frozen=True):
    reply = Resources
    pool: Pool
    replace: bool = False


class PoolRemove(Command, tag="pool_remove", frozen=True):
    reply = Resources
    name: str


class GroupAdd(Command, tag="group_add", frozen=True):
    reply = Resources
    group: Group
    replace: bool = False


class GroupRemove(Command, tag="group_remove", frozen=True):
    reply = Resources
    name: str


class ResourcesChanged(Event, tag="resources_changed", frozen=True):
    """What the provider sells changed (any of the commands above): the new listing."""

    resources: Resources
