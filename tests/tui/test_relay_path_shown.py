"""The path to a job's other side, as the user is told it (issue 24): "via relay <short id>" or
"direct" in the job view's title, `job show`, `job results` and `job forward`."""

from __future__ import annotations

from engine import api
from engine.domain.spec import JobSpec
from nunet_tui.cli.job_output import _detail, _results_text
from nunet_tui.screens.job_detail import path_part

VIA = "via relay 12D3KooW…MnsH"


def _job(state: str = "running", path: str = VIA) -> api.JobInfo:
    return api.JobInfo(
        job_id="a1b2c3d4e5f6",
        role="consumer",
        state=state,  # type: ignore[arg-type]
        provider="12D3KooWProvider",
        consumer="12D3KooWConsumer",
        spec=JobSpec(framework="scikit-learn", script_url="https://h/x.py"),
        path=path,
    )


def test_the_job_view_says_through_which_relay_a_running_job_is_reached() -> None:
    assert path_part(_job()) == (f" · {VIA}", "$text-warning")
    assert path_part(_job(path="direct")) == (" · direct", "")
    assert path_part(_job(path="")) is None  # not connected: nothing said
    assert path_part(_job(state="completed")) is None  # ended: the path no longer matters


def test_job_show_and_job_results_say_the_path() -> None:
    assert f"  path      {VIA}" in _detail(_job()).splitlines()
    assert "path" not in _detail(_job(path=""))
    results = api.JobResults(
        job_id="a1b2c3d4e5f6", directory="/r", sha256="ab" * 32, path=VIA, parts=4
    )
    assert f"fetched from the provider {VIA}, in 4 parts" in _results_text(results)
    one = api.JobResults(job_id="a1b2c3d4e5f6", directory="/r", sha256="ab" * 32, path="direct")
    assert "fetched from the provider directly" in _results_text(one)
    assert "fetched" not in _results_text(api.JobResults(job_id="a1b2c3d4e5f6", directory="/r"))
