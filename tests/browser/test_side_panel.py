"""The "GPU pools" side panel in a real JupyterLab, driven by headless Chromium.

The panel sees pools whoever launched them (its own form, a notebook kernel), shows their state
and growing cost, stops them (after a confirmation) so that no worker process is left, catches
form mistakes before anything is launched, and says once when the server stops answering. Live
pools come first; ended ones wait in a collapsed "Recent" section as compact rows without a Stop
button, and older history loads page by page on "Show more".

Screenshots go to ``test-artifacts/browser/<test>/``. With ``GPUGEEK_UPDATE_DOCS_SCREENSHOT=1``
the one of a live pool above an afternoon's ended pools also replaces ``docs/images/side-panel.png``
(the README's).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpugeek_jupyter.pricing import prices_in_force
from gpugeek_jupyter.spec import LAUNCH_FIELDS, PoolSpec
from gpugeek_jupyter.store import JobStatus, PoolStatus, Registry
from support.docs_images import keep_for_docs
from support.kernel import KernelSession, magics_kernel
from support.lab_server import LabServer, start_lab
from support.panel import (
    READY_TIMEOUT_MS,
    ended_row,
    expect,
    fill_launch_form,
    open_panel,
    pool_row,
    stop_from_panel,
    widen_sidebar,
)
from support.processes import alive, wait_until_gone

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def usd_so_far(row: Any) -> float:
    return float(row.locator(".gpugeek-usd-so-far").get_attribute("data-usd"))


def wait_for_growing_cost(row: Any, seconds: float = 15.0) -> tuple[float, float]:
    first = usd_so_far(row)
    deadline = time.monotonic() + seconds
    latest = first
    while latest <= first and time.monotonic() < deadline:
        row.page.wait_for_timeout(250)
        latest = usd_so_far(row)
    return first, latest


def worker_pids(registry: Registry, name: str, count: int, seconds: float = 15.0) -> list[int]:
    """The pool's worker pids, once the owner has recorded all ``count`` of them."""
    deadline = time.monotonic() + seconds
    while True:
        pool = registry.latest_pool(name)
        pids = [w.pid for w in registry.worker_intervals(pool.id) if w.pid]
        if len(pids) >= count or time.monotonic() > deadline:
            return pids
        time.sleep(0.2)


@pytest.fixture
def kernel(lab: LabServer) -> Iterator[KernelSession]:
    """A notebook kernel on the same registry as the server, with the magics loaded."""
    env = {"GPUGEEK_REGISTRY": str(lab.registry), "GPUGEEK_HEARTBEAT": "0.5", "GPUGEEK_PRELOAD_TORCH": "0"}
    with magics_kernel(env) as session:
        yield session


def test_panel_shows_pools_from_its_form_and_a_kernel_and_stops_both_leaving_no_worker(
    page: Any, lab: LabServer, kernel: KernelSession, artifacts: Path
) -> None:
    registry = Registry(lab.registry)
    panel = open_panel(page, lab)
    widen_sidebar(page)

    fill_launch_form(
        panel, gpu_type="cpu", count="2", backend="local", spot_fraction="0.5", budget="0.05", name="from-panel"
    )
    panel.locator(".gpugeek-launch-button").click()
    panel_row = pool_row(panel, "from-panel")
    expect(panel_row.locator(".gpugeek-status")).to_have_text("ready", timeout=READY_TIMEOUT_MS)
    expect(panel_row.locator(".gpugeek-pool-workers")).to_have_text("2/2 ready")
    first, later = wait_for_growing_cost(panel_row)
    assert later > first > 0, f"USD so far did not grow: {first} then {later}"
    page.screenshot(path=str(artifacts / "1-launched-from-panel.png"))

    launched = kernel.run("%gpugeek_launch --gpu-type cpu --count 1 --name from-kernel --quiet", timeout=60)
    assert launched.error is None, launched.text
    assert registry.latest_pool("from-kernel").owner_pid == kernel.pid  # not the server's pool
    kernel_row = pool_row(panel, "from-kernel")
    expect(kernel_row.locator(".gpugeek-status")).to_have_text("ready", timeout=READY_TIMEOUT_MS)
    first, later = wait_for_growing_cost(kernel_row)
    assert later > first > 0, f"USD so far did not grow: {first} then {later}"
    page.screenshot(path=str(artifacts / "2-two-pools.png"))

    pids = {name: worker_pids(registry, name, count) for name, count in (("from-panel", 2), ("from-kernel", 1))}
    assert [len(pids["from-panel"]), len(pids["from-kernel"])] == [2, 1], pids
    assert alive(pids["from-panel"] + pids["from-kernel"]) == pids["from-panel"] + pids["from-kernel"]

    stop_from_panel(panel, "from-panel")
    stop_from_panel(panel, "from-kernel")
    page.screenshot(path=str(artifacts / "3-both-stopped.png"))

    assert [registry.latest_pool(name).status for name in pids] == [PoolStatus.STOPPED, PoolStatus.STOPPED]
    assert wait_until_gone(pids["from-panel"] + pids["from-kernel"], 15) == []
    assert psutil.pid_exists(kernel.pid), "stopping its pool from the panel must not end the kernel"


def test_invalid_count_shows_an_inline_error_and_launches_nothing(page: Any, lab: LabServer, artifacts: Path) -> None:
    panel = open_panel(page, lab)
    posts: list[str] = []

    def record_post(request: Any) -> None:
        if request.method == "POST" and "/gpugeek/" in request.url:
            posts.append(request.url)

    page.on("request", record_post)

    fill_launch_form(panel, gpu_type="cpu", count="0", name="never-launched")
    panel.locator(".gpugeek-launch-button").click()

    error = panel.locator('.gpugeek-field[data-field="count"] .gpugeek-field-error')
    expect(error).to_have_text("GPUs must be a whole number from 1 to 1024, got '0' (e.g. 4)")  # the form's label
    expect(panel.locator('[name="count"]')).to_have_attribute("aria-invalid", "true")
    expect(panel.locator(".gpugeek-field-error")).to_have_count(1)  # only the bad field is blamed
    # the field's help is the launch fields' declaration, as the server serves it in the catalog
    count_help = next(f.help for f in LAUNCH_FIELDS if f.name == "count")
    expect(panel.locator('.gpugeek-field[data-field="count"] label')).to_have_attribute("title", count_help)
    expect(panel.locator('.gpugeek-field[data-field="walltime"]')).to_be_hidden()  # declared for slurm only
    page.screenshot(path=str(artifacts / "invalid-count.png"))
    panel.locator(".gpugeek-refresh-button").click()  # one more poll: the pool must still be absent
    expect(pool_row(panel, "never-launched")).to_have_count(0)
    assert posts == []
    assert "never-launched" not in [record.name for record in Registry(lab.registry).list_pools()]


def test_outage_notice_appears_once_while_the_server_is_down(
    page: Any, chromium: Path, tmp_path: Path, artifacts: Path
) -> None:
    server = start_lab(tmp_path / "lab", tmp_path / "lab" / "gpugeek.sqlite")
    try:
        panel = open_panel(page, server)
        outage = panel.locator(".gpugeek-outage")
        expect(outage).to_be_hidden()
        assert server.stop() == []

        expect(outage).to_be_visible(timeout=20_000)
        expect(outage.locator(".gpugeek-outage-message")).to_have_text("The Jupyter server is not answering.")
        for _ in range(2):  # more failed polls keep the one notice
            panel.locator(".gpugeek-refresh-button").click()
            page.wait_for_timeout(500)
        expect(panel.locator(".gpugeek-outage-message")).to_have_count(1)
        expect(outage.locator(".gpugeek-outage-hint")).to_contain_text("jupyter server extension list")
        page.screenshot(path=str(artifacts / "outage.png"))
    finally:
        server.stop()


DAY = 24 * 3600.0
RECENT_ENDED = 10  # ended within the last 24 h: the Recent section
OLDER_ENDED = 40  # ended days ago: history pages behind "Show more"
FAILED_REASON = (
    "worker 0 did not connect to the scheduler within 60 s: the image has no dask-cuda"
    " (pip install dask-cuda, or pick a cpu pool)\nTraceback (most recent call last):\n  ...\nTimeoutError"
)


class SettableClock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def record_ended_pool(registry: Registry, clock: SettableClock, name: str, ended_at: float, index: int) -> None:
    """One cpu pool that ran half an hour and ended at ``ended_at``: failed (launch never came up),
    lost or stopped, by ``index``, written as the owners' own writes would have."""
    spec = PoolSpec.create(gpu_type="cpu", count=1, backend="local", name=name)
    clock.now = ended_at - 1800
    record = registry.add_pool(spec.name, spec.backend, spec.to_dict(), prices_in_force(spec), owner="kernel 1")
    clock.now = ended_at
    if index % 3 == 0:
        registry.set_pool_status(record.id, PoolStatus.FAILED, reason=FAILED_REASON)
        return
    registry.open_worker_interval(record.id, "0", "on_demand", started_at=ended_at - 1800)
    if index % 3 == 1:
        registry.set_pool_status(record.id, PoolStatus.LOST, reason="no heartbeat from its owner for 42 s")
    else:
        registry.set_pool_status(record.id, PoolStatus.STOPPED, reason="stopped from a notebook")


def record_history(path: Path) -> tuple[list[str], list[str]]:
    """40 pools that ended days ago, then 10 that ended today, oldest first as they would have been
    made; returns the names as the panel should list them (newest end first): (recent, older)."""
    clock = SettableClock()
    start = clock.now
    registry = Registry(path, clock=clock)
    older = [f"old-{i:02d}" for i in range(OLDER_ENDED)]
    recent = [f"today-{i:02d}" for i in range(RECENT_ENDED)]
    for i in reversed(range(OLDER_ENDED)):
        record_ended_pool(registry, clock, older[i], start - (i + 2) * DAY, i)
    for i in reversed(range(RECENT_ENDED)):
        record_ended_pool(registry, clock, recent[i], start - (i + 1) * 2 * 3600, i)
    registry.close()
    return recent, older


def names_of(rows: Any) -> list[str]:
    return rows.evaluate_all("rows => rows.map(row => row.dataset.poolName)")


def test_live_pool_comes_first_and_ended_pools_wait_collapsed_in_recent_with_older_history_on_demand(
    page: Any, chromium: Path, tmp_path: Path, artifacts: Path
) -> None:
    server = start_lab(tmp_path / "lab", tmp_path / "lab" / "gpugeek.sqlite")
    try:
        recent, older = record_history(server.registry)
        status, body = server.call("POST", "gpugeek/pools", {"gpu_type": "cpu", "count": 1, "name": "training"})
        assert status == 201, body
        registry = Registry(server.registry)
        live = registry.latest_pool("training")
        registry.add_job("job-resnet-7", live.id, live.name, "torchrun", "ab" * 32, ranks=1, hyperparams={"lr": 0.1})

        panel = open_panel(page, server)
        widen_sidebar(page, 420)
        card = pool_row(panel, "training")
        expect(card.locator(".gpugeek-status")).to_have_text("ready", timeout=READY_TIMEOUT_MS)
        running = card.locator('.gpugeek-pool-job[data-job-id="job-resnet-7"]')
        expect(running.locator(".gpugeek-pool-job-status")).to_have_text("running")

        # the live card is the first thing under the header: no ended pool above it, nothing between
        first = panel.locator(".gpugeek-pool-row, .gpugeek-ended-row").first
        expect(first).to_have_attribute("data-pool-name", "training")
        header_box = panel.locator(".gpugeek-panel-header").bounding_box()
        card_box = card.bounding_box()
        gap = card_box["y"] - (header_box["y"] + header_box["height"])
        assert 0 <= gap < 16, f"{gap:.0f} px between the panel header and the live pool's card"

        # Recent: collapsed by default, one summary line; every ended pool of the day is in it
        toggle = panel.locator(".gpugeek-recent-toggle")
        expect(toggle).to_have_attribute("aria-expanded", "false")
        expect(panel.locator(".gpugeek-recent-summary")).to_have_text("10 ended · 4 failed · 3 lost")
        recent_rows = panel.locator(".gpugeek-recent-list .gpugeek-ended-row")
        expect(recent_rows).to_have_count(RECENT_ENDED)
        for row in recent_rows.all():
            expect(row).to_be_hidden()
        page.screenshot(path=str(artifacts / "1-recent-collapsed.png"))

        toggle.click()
        expect(toggle).to_have_attribute("aria-expanded", "true")
        expect(recent_rows.first).to_be_visible()
        assert names_of(recent_rows) == recent  # newest end first
        failed = ended_row(panel, "today-00")
        expect(failed.locator(".gpugeek-status")).to_have_text("failed")
        reason = failed.locator(".gpugeek-ended-reason")
        shown = reason.text_content()
        assert FAILED_REASON.startswith(shown.removesuffix("…")) and shown.endswith("…"), shown  # its start, once
        expect(reason).to_have_attribute("title", FAILED_REASON)  # the whole text, one hover away
        assert reason.bounding_box()["height"] < 20, "a failed pool's reason takes one line"
        expect(ended_row(panel, "today-02").locator(".gpugeek-ended-reason")).to_have_count(0)  # stopped: none
        expect(ended_row(panel, "today-02").locator(".gpugeek-ended-when")).to_have_text("6 h ago")
        assert float(ended_row(panel, "today-02").locator(".gpugeek-ended-cost").get_attribute("data-usd")) > 0
        expect(panel.locator(".gpugeek-stop-button")).to_have_count(1)  # the live pool's only
        expect(panel.locator(".gpugeek-ended-row button")).to_have_count(0)
        page.screenshot(path=str(artifacts / "2-recent-open.png"))
        keep_for_docs(artifacts / "2-recent-open.png", "side-panel.png")

        # Show more pages through the history, each record once, newest first
        older_rows = panel.locator(".gpugeek-older-list .gpugeek-ended-row")
        expect(older_rows).to_have_count(0)
        show_more = panel.locator(".gpugeek-show-more")
        show_more.click()
        expect(older_rows).to_have_count(15)  # the first page of 25 repeats Recent's 10
        show_more.click()
        expect(older_rows).to_have_count(OLDER_ENDED)
        assert names_of(older_rows) == older
        expect(show_more).to_be_hidden()
        expect(panel.locator(".gpugeek-history-end")).to_be_visible()
        expect(panel.locator(".gpugeek-ended-row")).to_have_count(RECENT_ENDED + OLDER_ENDED)
        expect(panel.locator(".gpugeek-ended-row .gpugeek-stop-button")).to_have_count(0)
        page.screenshot(path=str(artifacts / "3-older-loaded.png"))

        # a poll keeps the loaded history; stopping the live pool moves it into Recent
        panel.locator(".gpugeek-refresh-button").click()
        expect(older_rows).to_have_count(OLDER_ENDED)
        stop_from_panel(panel, "training")
        assert names_of(recent_rows)[0] == "training"
        expect(panel.locator(".gpugeek-recent-summary")).to_have_text("11 ended · 4 failed · 3 lost")
        assert registry.job("job-resnet-7").status is JobStatus.CANCELLED
    finally:
        left = server.stop()
    assert left == [], f"processes left after jupyter lab stopped: {left}\n{server.log_tail()}"
