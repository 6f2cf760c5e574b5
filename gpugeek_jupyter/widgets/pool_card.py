"""The pool card: an ipywidgets view of one pool that updates as workers come up."""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets

_ENDED = {"stopped", "failed", "lost"}  # no processes left: nothing for a dashboard link to open
_STATUS_COLOURS = {
    "starting": "#b26b00",
    "ready": "#1a7f37",
    "stopping": "#b26b00",
    "stopped": "#57606a",
    "failed": "#cf222e",
    "lost": "#cf222e",
}


class PoolCard(widgets.VBox):
    """Name, backend, GPUs, workers ready, status, dashboard link and USD per hour of one pool.

    >>> card = PoolCard(spec, usd_per_hour=0.10)      # doctest: +SKIP
    >>> card.set_progress(1, 2)                        # "1/2 workers ready"
    """

    def __init__(self, spec: Any, usd_per_hour: float | None = None) -> None:
        self._spec = spec
        self._status = "starting"
        self._ready = 0
        self._dashboard: str | None = None
        self._usd_per_hour = usd_per_hour
        self._message = ""
        self._body = widgets.HTML()
        self._progress = widgets.IntProgress(value=0, min=0, max=spec.count, layout=widgets.Layout(width="260px"))
        super().__init__([self._body, self._progress])
        self.add_class("gpugeek-pool-card")
        self._render()

    def set_progress(self, ready: int, total: int) -> None:
        self._ready = ready
        self._progress.max = total
        self._progress.value = ready
        self._render()

    def set_status(self, status: str, message: str = "") -> None:
        self._status = status
        self._message = message
        if status in _ENDED or status == "stopping":  # its scheduler is going: the link would open nothing
            self._dashboard = None
        if status != "starting":
            self._progress.layout.display = "none"
        self._render()

    def set_running(self, dashboard_link: str | None, usd_per_hour: float) -> None:
        from ..dashboards import browser_link

        self._dashboard = browser_link(dashboard_link)  # the Jupyter server's route, behind its login
        self._usd_per_hour = usd_per_hour
        self._ready = self._spec.count
        self.set_status("ready")

    def add_child(self, child: widgets.Widget) -> None:
        """Embed another widget (e.g. the cost meter) under the card."""
        self.children = (*tuple(self.children), child)  # type: ignore[has-type]  # an ipywidgets trait

    @property
    def text(self) -> str:
        """The card's content as plain text (for logs and tests)."""
        import re

        return re.sub(r"<[^>]+>", " ", self._body.value)

    def _render(self) -> None:
        spec = self._spec
        colour = _STATUS_COLOURS.get(self._status, "#57606a")
        gpus = f"{spec.count} x cpu worker" if spec.gpu_type == "cpu" else f"{spec.count} x {spec.gpu_type}"
        ended = self._status in _ENDED
        workers = f"none left (pool {self._status})" if ended else f"{self._ready}/{spec.count} workers ready"
        if self._status == "stopping":
            workers = f"shutting down {spec.count} workers"
        rows = [
            ("backend", spec.backend + (f" ({spec.namespace})" if spec.namespace else "")),
            ("GPUs", gpus + (f", {spec.interconnect}" if spec.gpu_type != "cpu" else "")),
            ("workers", workers),
        ]
        if spec.spot_workers:
            rows.append(
                ("pricing", f"{spec.spot_workers} spot / {spec.reserved_workers} {spec.base_pricing.replace('_', '-')}")
            )
        if self._usd_per_hour is not None:
            from ..cost.ledger import usd_amount

            rows.append(("USD per hour", usd_amount(self._usd_per_hour)))
        if self._dashboard:
            link = html.escape(self._dashboard)
            rows.append(("dashboard", f'<a href="{link}" target="_blank">{link}</a>'))
        cells = "".join(
            f"<tr><td style='padding:0 12px 0 0;color:var(--jp-ui-font-color1, #3d444d)'>{k}</td><td>{v if k == 'dashboard' else html.escape(v)}</td></tr>"
            for k, v in rows
        )
        message = f"<div style='color:{colour}'>{html.escape(self._message)}</div>" if self._message else ""
        self._body.value = (
            f"<div class='gpugeek-pool-card'><b>{html.escape(spec.name)}</b> "
            f"<span class='gpugeek-status' style='color:white;background:{colour};border-radius:8px;"
            f"padding:0 6px;font-size:90%'>{html.escape(self._status)}</span>"
            f"<table style='margin-top:4px'>{cells}</table>{message}</div>"
        )
