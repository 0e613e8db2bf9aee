"""What a provider sells (engine/domain/specs.py): the one validator, bounded by the
onboarded capacity, the file it is kept in, and NuNet's tiers as the default specs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from nacl.signing import SigningKey

from engine import api
from engine.domain import specs as rs
from engine.errors import EngineError
from engine.facade import Engine
from engine.identity import Identity
from engine.resources.spec_file import ResourceFile
from oracle_client.ntx import units_of
from tests.conftest import TEST_ADDRESS

CAPACITY = api.Capacity(
    view="onboarded",
    cpu_cores=4,
    cpu_mhz=8000,
    memory_mb=8192,
    disk_mb=50_000,
    gpus=(
        api.GpuInfo(index=0, vendor="nvidia", name="RTX 3090", vram_mb=24576, uuid="GPU-a"),
        api.GpuInfo(index=1, vendor="nvidia", name="RTX 3090", vram_mb=24576, uuid="GPU-b"),
    ),
)
NOT_ONBOARDED = api.Capacity(view="onboarded", cpu_cores=0, cpu_mhz=0, memory_mb=0, disk_mb=0)


def peer(n: int) -> str:
    return Identity(SigningKey(bytes([n]) * 32)).peer_id


def spec(**fields: object) -> api.ResourceSpec:
    base: dict[str, object] = {
        "name": "small",
        "cpu_cores": 2,
        "ram_mb": 4096,
        "price_units_hour": 2_400_000,
    }
    return api.ResourceSpec(**{**base, **fields})  # type: ignore[arg-type]


def fields(problems: list[rs.FieldError]) -> list[str]:
    return [p.field for p in problems]


def test_a_spec_within_the_onboarded_capacity_is_fine() -> None:
    assert rs.check_spec(spec(), CAPACITY, (), ()) == []
    assert rs.check_spec(spec(cpu_cores=4, ram_mb=8192, gpus=2), CAPACITY, (), ()) == []


def test_every_bad_field_is_one_line_of_its_own() -> None:
    bad = spec(name=" x", cpu_cores=5, ram_mb=9000, disk_mb=60_000, gpus=3, pool="lab")
    problems = rs.check_spec(bad, CAPACITY, (), ())
    assert fields(problems) == ["name", "cpu_cores", "ram_mb", "disk_mb", "gpus", "pool"]
    assert all("\n" not in p.message for p in problems)
    by_field = {p.field: p.message for p in problems}
    assert "give 1 to 4" in by_field["cpu_cores"]
    assert "8192 MB" in by_field["ram_mb"]
    assert "no pool named 'lab'" in by_field["pool"]


def test_capacity_bounds_every_spec_and_not_onboarded_says_so() -> None:
    (problem,) = rs.check_spec(spec(), NOT_ONBOARDED, (), ())
    assert problem.field == "capacity" and "not onboarded" in problem.message


def test_names_prices_and_duplicates() -> None:
    existing = (spec(),)
    assert fields(rs.check_spec(spec(), CAPACITY, (), (), specs=existing)) == ["name"]
    assert rs.check_spec(spec(ram_mb=2048), CAPACITY, (), (), specs=existing, replace=True) == []
    assert fields(rs.check_spec(spec(name="other"), CAPACITY, (), (), replace=True)) == ["name"]
    for name in ("", "a" * 41, "x/y", "two  spaces", "-lead"):
        assert fields(rs.check_spec(spec(name=name), CAPACITY, (), ())) == ["name"], name
    assert rs.check_spec(spec(name="4 CPU · 8 GB"), CAPACITY, (), ())[0].field == "name"
    assert rs.check_spec(spec(name="RTX 3090 x2"), CAPACITY, (), ()) == []
    too_dear = spec(price_units_hour=rs.MAX_PRICE_UNITS_HOUR + 1, min_charge_units=-1)
    assert fields(rs.check_spec(too_dear, CAPACITY, (), ())) == [
        "price_units_hour",
        "min_charge_units",
    ]


def test_a_spec_on_a_custom_resource() -> None:
    rtx = api.CustomResource(name="RTX 3090", count=2, from_gpus=(0, 1), vram_mb=24576)
    tpu = api.CustomResource(name="TPU 1684X", kind="accelerator", count=1, model="Sophon")
    assert rs.check_custom(rtx, CAPACITY) == []
    assert rs.check_custom(tpu, CAPACITY) == []
    ok = spec(gpus=2, gpu_resource="RTX 3090")
    assert rs.check_spec(ok, CAPACITY, (rtx, tpu), ()) == []
    assert fields(rs.check_spec(spec(gpus=3, gpu_resource="RTX 3090"), CAPACITY, (rtx,), ())) == [
        "gpus"
    ]
    assert fields(rs.check_spec(spec(gpus=1, gpu_resource="nope"), CAPACITY, (rtx,), ())) == [
        "gpu_resource"
    ]
    # Regrouped GPUs the onboarding no longer offers cannot be sold.
    one_gpu = api.Capacity(**{**api.to_builtins(CAPACITY), "gpus": (CAPACITY.gpus[0],)})
    problems = rs.check_spec(ok, one_gpu, (rtx,), ())
    assert fields(problems) == ["gpu_resource"] and "GPU 1" in problems[0].message


def test_custom_resource_rules() -> None:
    assert fields(rs.check_custom(api.CustomResource(name="x", from_gpus=(7,)), CAPACITY)) == [
        "from_gpus"
    ]
    assert fields(
        rs.check_custom(api.CustomResource(name="x", count=1, from_gpus=(0, 1)), CAPACITY)
    ) == ["count"]
    assert fields(rs.check_custom(api.CustomResource(name="x", count=0), CAPACITY)) == ["count"]
    assert fields(rs.check_custom(api.CustomResource(name="x", model="a\x1b[2J"), CAPACITY)) == [
        "model"
    ]


def test_pools_groups_and_who_may_use_them() -> None:
    lab = api.Group(name="lab", members=(peer(1), peer(2)))
    assert rs.check_group(lab) == []
    assert fields(rs.check_group(api.Group(name="g", members=("not-a-peer",)))) == ["members"]
    pool = api.Pool(name="research", members=(peer(3),), groups=("lab",))
    assert rs.check_pool(pool, (lab,)) == []
    assert fields(rs.check_pool(pool, ())) == ["groups"]
    assert fields(rs.check_pool(api.Pool(name="default", members=(peer(1),)))) == ["name"]
    assert fields(rs.check_pool(api.Pool(name="empty"))) == ["members"]
    (expanded,) = rs.expanded_pools((pool,), (lab,))
    assert expanded.members == (peer(3), peer(1), peer(2))
    assert rs.may_use("default", (), None) is None
    assert rs.may_use("research", (expanded,), peer(2)) is None
    assert rs.may_use("research", (expanded,), peer(9)) == "reserved for group lab"
    assert rs.may_use("gone", (expanded,), peer(2)) == "reserved for pool gone"


def test_the_advert_bound_on_pool_members() -> None:
    many = api.Group(name="many", members=tuple(peer(i) for i in range(100)))
    first = api.Pool(name="a", groups=("many",))
    second = api.Pool(name="b", groups=("many",))
    assert rs.check_pool(first, (many,)) == []
    problems = rs.check_pool(second, (many,), (first,))
    assert fields(problems) == ["members"] and "at most 128" in problems[0].message


def test_default_specs_are_the_tiers_at_the_configured_prices_in_exact_units() -> None:
    specs = rs.default_specs({"low": 1_000_000, "moderate": 2_500_000, "high": 1})
    assert [(s.name, s.price_units_hour) for s in specs] == [
        ("low", 1_000_000),
        ("moderate", 2_500_000),
        ("high", 1),
    ]
    assert [(s.cpu_cores, s.ram_mb, s.gpus) for s in specs] == [
        (1, 2048, 0),
        (4, 8192, 0),
        (8, 16384, 0),
    ]
    assert units_of(0.1) == 100_000 and units_of(2.4) == 2_400_000
    assert [s.name for s in rs.default_specs({"moderate": 2_000_000}, gpus=1)] == ["moderate"]
    assert rs.default_specs({"moderate": 2_000_000}, gpus=1)[0].gpus == 1
    book = rs.ResourceBook()
    assert rs.in_force(book, {"low": 1_000_000}, 0)[1] is True
    defined = rs.ResourceBook(specs=(spec(),))
    assert rs.in_force(defined, {"low": 1_000_000}, 0) == ((spec(),), False)


def test_the_file_round_trips_atomically(tmp_path: Path) -> None:
    file = ResourceFile(tmp_path / "config" / "resources.json")
    assert file.load() == rs.ResourceBook()
    book = rs.ResourceBook(
        specs=(spec(pool="p"),),
        pools=(api.Pool(name="p", members=(peer(1),)),),
    )
    file.save(book)
    assert file.load() == book
    assert ResourceFile(file.path).load() == book  # read afresh from disk
    assert os.stat(file.path).st_mode & 0o777 == 0o600
    assert [p.name for p in file.path.parent.iterdir()] == ["resources.json"]  # no temporary


def test_a_bad_file_is_a_clear_error_and_is_never_written_over(tmp_path: Path) -> None:
    path = tmp_path / "resources.json"
    path.write_text('{"specs": [{"name": "x"}]}', encoding="utf-8")
    file = ResourceFile(path)
    with pytest.raises(EngineError) as info:
        file.load()
    assert info.value.code == "resources_file" and str(path) in info.value.message
    assert "\n" not in info.value.message
    with pytest.raises(EngineError):
        file.save(rs.ResourceBook())
    assert json.loads(path.read_text(encoding="utf-8")) == {"specs": [{"name": "x"}]}
    # A hand edit that no door would let in (a spec in a pool never defined) is refused too.
    path.write_text(json.dumps({"specs": [api.to_builtins(spec(pool="ghost"))]}), "utf-8")
    with pytest.raises(EngineError) as info:
        ResourceFile(path).load()
    assert "no pool named 'ghost'" in info.value.message


def test_the_engine_room_checks_saves_and_announces(engine_client: Engine) -> None:
    """Through the facade, as the TUI calls it: CheckSpec as you type, SpecAdd saving and
    announcing the new listing, a removal that would orphan a spec refused."""
    events: list[api.Event] = []
    engine_client.subscribe(events.append)
    engine_client.call_blocking(
        api.OnboardRequest(memory_mb=8000, cpu_mhz=4000, address=TEST_ADDRESS)
    )
    check = engine_client.call_blocking(api.CheckSpec(spec=spec(cpu_cores=9)))
    assert not check.ok and [p.field for p in check.problems] == ["cpu_cores"]
    engine_client.call_blocking(api.PoolAdd(pool=api.Pool(name="lab", members=(peer(1),))))
    listing = engine_client.call_blocking(api.SpecAdd(spec=spec(pool="lab")))
    assert listing.defaults is False and listing.specs == (spec(pool="lab"),)
    assert listing.onboarded.cpu_cores == 2 and listing.system.cpu_cores == 2
    with pytest.raises(EngineError) as info:
        engine_client.call_blocking(api.PoolRemove(name="lab"))
    assert info.value.code == "in_use"
    with pytest.raises(EngineError) as info:
        engine_client.call_blocking(api.SpecAdd(spec=spec()))
    assert info.value.problems[0].field == "name"  # one problem per field, for the form
    changed = [e for e in events if isinstance(e, api.ResourcesChanged)]
    assert [(e.resources.defaults, len(e.resources.specs)) for e in changed] == [
        (True, 3),
        (False, 1),
    ]
