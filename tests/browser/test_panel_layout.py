"""The side panel as a person sees it: laid out in the order of work, with JupyterLab's own
controls, a harmless default in the stop confirmation, and a stop shown within a second whoever
made it (Chromium, 1280 px wide)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpugeek_jupyter.store import PoolStatus, Registry
from support.agent import agent_stopped_afterwards
from support.docs_images import keep_for_docs
from support.kernel import KernelSession, magics_kernel
from support.lab_server import LabServer, start_lab
from support.panel import (
    READY_TIMEOUT_MS,
    expect,
    fill_launch_form,
    open_launch_form,
    open_panel,
    pool_row,
    stop_from_panel,
    widen_sidebar,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PAGE_VIEWPORT = {"width": 1280, "height": 800}


@pytest.fixture
def kernel(lab: LabServer) -> Iterator[KernelSession]:
    env = {"GPUGEEK_REGISTRY": str(lab.registry), "GPUGEEK_HEARTBEAT": "0.5", "GPUGEEK_PRELOAD_TORCH": "0"}
    with magics_kernel(env) as session:
        yield session


def _style(locator: Any, prop: str) -> str:
    return str(locator.evaluate(f"element => getComputedStyle(element).getPropertyValue('{prop}')"))


def test_pools_and_jobs_come_first_the_form_is_collapsed_below_and_controls_look_like_jupyterlabs(
    page: Any, lab: LabServer, kernel: KernelSession, artifacts: Path, screenshot_on_failure: None
) -> None:
    launched = kernel.run("%gpugeek_launch --gpu-type cpu --count 1 --name layout --quiet", timeout=90)
    assert launched.error is None, launched.text
    panel = open_panel(page, lab)
    widen_sidebar(page)
    row = pool_row(panel, "layout")
    expect(row.locator(".gpugeek-status")).to_have_text("ready", timeout=READY_TIMEOUT_MS)

    sections = panel.locator("section.gpugeek-section").evaluate_all(
        "nodes => nodes.map(node => [...node.classList].find(c => c !== 'gpugeek-section'))"
    )
    assert sections[:4] == ["gpugeek-pools", "gpugeek-jobs", "gpugeek-recent", "gpugeek-launch"], sections
    toggle = panel.locator(".gpugeek-launch-toggle")
    expect(toggle).to_have_attribute("aria-expanded", "false")
    expect(panel.locator(".gpugeek-launch-form")).to_be_hidden()
    assert _style(panel.locator(".gpugeek-panel-header"), "position") == "sticky"
    # pools and spend at a glance, in the header
    glance = panel.locator(".gpugeek-panel-header .gpugeek-glance")
    expect(glance.locator(".gpugeek-glance-text")).to_have_text(re.compile(r"^1 live pool · 1/1 worker · \$[0-9.]+/h$"))
    expect(glance.locator(".gpugeek-glance-spent")).to_have_text(re.compile(r"^\$[0-9.]+$"))

    # a link that looks like one: the theme's link colour, underlined
    link = row.locator(".gpugeek-dashboard-link")
    expect(link).to_be_visible()
    assert "underline" in _style(link, "text-decoration-line")
    link_colour = page.evaluate(
        "() => { const probe = document.createElement('span');"
        " probe.style.color = 'var(--jp-content-link-color)'; document.body.appendChild(probe);"
        " const colour = getComputedStyle(probe).color; probe.remove(); return colour; }"
    )
    assert _style(link, "color") == link_colour

    # a dropdown that looks like one: JupyterLab's HTMLSelect with its caret
    open_launch_form(panel)
    select = panel.locator('select[name="gpu_type"]')
    wrapper = select.locator("xpath=..")
    assert "jp-HTMLSelect" in (wrapper.get_attribute("class") or "")
    expect(wrapper.locator("svg")).to_be_visible()
    keep = panel.locator('input[name="keep"]')
    expect(keep).not_to_be_checked()
    expect(panel.locator("#gpugeek-launch-keep-hint")).to_contain_text("survives the kernel")
    page.screenshot(path=str(artifacts / "panel-layout.png"))

    # the header stays in view when the panel scrolls to the form's end
    panel.locator(".gpugeek-launch-button").scroll_into_view_if_needed()
    header = panel.locator(".gpugeek-panel-header").bounding_box()
    panel_box = panel.bounding_box()
    assert abs(header["y"] - panel_box["y"]) < 2, (header, panel_box)

    # the stop confirmation opens with the focus on Cancel; Enter keeps the pool
    row.locator(".gpugeek-stop-button").click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("Stop pool layout?")
    focused = page.evaluate("() => document.activeElement && document.activeElement.textContent")
    assert focused is not None and "Cancel" in focused, focused
    page.keyboard.press("Enter")
    expect(dialog).to_have_count(0)
    page.wait_for_timeout(500)
    assert Registry(lab.registry).latest_pool("layout").status is PoolStatus.READY


def test_a_stop_from_a_notebook_shows_in_the_panel_within_a_second(
    page: Any, lab: LabServer, kernel: KernelSession, screenshot_on_failure: None
) -> None:
    launched = kernel.run("%gpugeek_launch --gpu-type cpu --count 1 --name stop-me --quiet", timeout=90)
    assert launched.error is None, launched.text
    panel = open_panel(page, lab)
    status = pool_row(panel, "stop-me").locator(".gpugeek-status")
    expect(status).to_have_text("ready", timeout=READY_TIMEOUT_MS)
    page.wait_for_timeout(2_500)  # past a listing: the next one is 2 s away, the change is not
    registry = Registry(lab.registry)
    stop = kernel.execute("%gpugeek_stop stop-me")
    began = None
    shown = None
    deadline = time.monotonic() + 30
    while shown is None and time.monotonic() < deadline:
        if began is None and registry.latest_pool("stop-me").status is not PoolStatus.READY:
            began = time.monotonic()  # the kernel wrote stopping
        texts = status.all_inner_texts()  # does not wait: the row may leave between two looks
        if began is not None and (not texts or texts[0] != "ready"):
            shown = time.monotonic()
        page.wait_for_timeout(50)
    assert began is not None and shown is not None
    assert shown - began < 1.0, f"the panel showed the stop {shown - began:.2f} s after the registry had it"
    result = kernel.collect(stop, timeout=60)
    assert result.error is None, result.text


@pytest.mark.timeout(240)
def test_the_keep_checkbox_launches_a_pool_owned_by_the_users_agent(
    page: Any, lab: LabServer, monkeypatch: pytest.MonkeyPatch, screenshot_on_failure: None
) -> None:
    monkeypatch.setenv("GPUGEEK_REGISTRY", str(lab.registry))  # the agent stopped afterwards is that registry's
    with agent_stopped_afterwards():
        panel = open_panel(page, lab)
        fill_launch_form(panel, gpu_type="cpu", count="1", backend="local", name="kept-form")
        panel.locator('input[name="keep"]').check()
        with page.expect_request(lambda r: r.method == "POST" and "/gpugeek/pools" in r.url) as sent:
            panel.locator(".gpugeek-launch-button").click()
        assert sent.value.post_data_json["keep"] is True
        row = pool_row(panel, "kept-form")
        expect(row.locator(".gpugeek-status")).to_have_text("ready", timeout=READY_TIMEOUT_MS)
        record = Registry(lab.registry).latest_pool("kept-form")
        assert "agent" in record.owner, record.owner  # not the Jupyter server's pool
        stop_from_panel(panel, "kept-form")


def test_form_errors_use_the_forms_labels_mark_gpus_this_machine_lacks_and_clear_on_change(
    page: Any, lab: LabServer, artifacts: Path, screenshot_on_failure: None
) -> None:
    from gpugeek_jupyter.devices import select_visible
    from gpugeek_jupyter.nvml import discover_gpus

    if select_visible(discover_gpus().devices):
        pytest.skip("this machine has NVIDIA GPUs: no GPU type is missing from it for sure")
    panel = open_panel(page, lab)
    fill_launch_form(panel, gpu_type="A100-80GB", count="1", backend="local", name="no-a100")
    option = panel.locator('select[name="gpu_type"] option[value="A100-80GB"]')
    expect(option).to_contain_text("none on this machine")
    error = panel.locator('.gpugeek-field[data-field="gpu_type"] .gpugeek-field-error')
    expect(error).to_contain_text("This machine has no A100-80GB (it has no NVIDIA GPU")
    expect(error).to_contain_text("pick GPU type cpu for a local pool")
    assert '"gpu_type"' not in error.inner_text() and "gpu_type" not in error.inner_text()
    page.screenshot(path=str(artifacts / "form-error.png"))
    keep_for_docs(artifacts / "form-error.png", "form-error.png")
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    panel.locator(".gpugeek-launch-button").click()
    expect(error).to_be_visible()
    assert posts == []  # caught in the form, nothing sent
    fill_launch_form(panel, gpu_type="cpu")
    expect(panel.locator(".gpugeek-field-error")).to_have_count(0)  # gone as soon as the input changed
    fill_launch_form(panel, gpu_type="A100-80GB", backend="kubernetes")
    expect(panel.locator(".gpugeek-field-error")).to_have_count(0)  # a cluster may have them

    # the server's own answer (an address pool needs a scheduler address, which this form has no
    # field for), in the form's words, gone at the next edit
    fill_launch_form(panel, gpu_type="cpu", count="1", backend="address", name="no-address")
    panel.locator(".gpugeek-launch-button").click()
    form_error = panel.locator(".gpugeek-form-error")
    expect(form_error).to_contain_text('Launch failed: Backend "address" needs "address"')
    assert '"backend":' not in form_error.inner_text()
    fill_launch_form(panel, count="2")
    expect(form_error).to_have_text("")


@pytest.fixture
def quota_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    """A lab whose settings limit the user to 4 workers and $50 a day."""
    home = tmp_path_factory.mktemp("quota-lab")
    (home / "config").mkdir(parents=True)
    (home / "config" / "jupyter_gpugeek_config.json").write_text(
        json.dumps({"GpugeekConfig": {"quota_max_workers": 4, "quota_usd_per_day": 50.0}})
    )
    server = start_lab(home, home / "gpugeek.sqlite")
    yield server
    left = server.stop()
    assert left == [], f"processes left after jupyter lab stopped: {left}\n{server.log_tail()}"


def test_the_header_has_a_quota_line_when_a_limit_applies(
    page: Any, quota_lab: LabServer, screenshot_on_failure: None
) -> None:
    env = {"GPUGEEK_REGISTRY": str(quota_lab.registry), "GPUGEEK_HEARTBEAT": "0.5", "GPUGEEK_PRELOAD_TORCH": "0"}
    with magics_kernel(env, launch="--gpu-type cpu --count 1 --name limited --quiet", stop="limited"):
        panel = open_panel(page, quota_lab)
        expect(pool_row(panel, "limited").locator(".gpugeek-status")).to_have_text("ready", timeout=READY_TIMEOUT_MS)
        quota = panel.locator(".gpugeek-panel-header .gpugeek-quota")
        expect(quota).to_have_text(
            re.compile(r"^quota 1/4 workers · \$[0-9.]+ of \$50\.00 today$"), timeout=READY_TIMEOUT_MS
        )
