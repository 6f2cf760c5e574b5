"""The cost meter: an ipywidgets view of one pool's spend, read from the ledger (the registry).

USD per hour now, USD so far, projected USD at this rate, and a budget bar that turns amber at 80 %
and red at 100 %. The pool card embeds it (``card.add_child(CostMeter(pool, tick_seconds=2))``).
"""

from __future__ import annotations

import html
import logging
import threading
from typing import Any

import ipywidgets as widgets
from traitlets import Float, Unicode

from ..cost.guards import BUDGET_WARNING_FRACTION
from ..cost.ledger import CostBreakdown, pool_cost, usd_amount
from ..store import Registry, get_registry

log = logging.getLogger(__name__)

_LEVEL_COLOURS = {"ok": "#1a7f37", "warning": "#b26b00", "exceeded": "#cf222e", "none": "#57606a"}


class CostMeter(widgets.VBox):
    """Live spend of one pool.

    >>> meter = CostMeter(pool)                 # doctest: +SKIP
    >>> meter.refresh().total_usd               # doctest: +SKIP
    0.42
    >>> meter.start_ticking(2.0)                # refresh every 2 s until the pool ends  # doctest: +SKIP

    ``pool`` is a :class:`~gpugeek_jupyter.pools.Pool`, a registry pool record, or a pool id.
    """

    usd_per_hour = Float(0.0, help="USD per hour the pool costs now")
    usd_so_far = Float(0.0, help="USD spent so far (compute, storage, network)")
    projected_usd = Float(0.0, help="USD after projection_hours more at the present rate")
    budget_fraction = Float(None, allow_none=True, help="share of the budget spent; None without a budget")
    level = Unicode("none", help="none (no budget), ok, warning (>= 80 %) or exceeded (>= 100 %)")

    def __init__(
        self,
        pool: Any,
        registry: Registry | None = None,
        projection_hours: float = 24.0,
        tick_seconds: float | None = None,
    ) -> None:
        self.pool_id = int(pool if isinstance(pool, int) else pool.id)
        manager = getattr(pool, "_manager", None)
        self.registry = registry or getattr(manager, "registry", None) or get_registry()
        self.projection_hours = projection_hours
        self.breakdown: CostBreakdown | None = None
        self._text = widgets.HTML()
        self._bar = widgets.FloatProgress(value=0.0, min=0.0, max=1.0, layout=widgets.Layout(width="260px"))
        self._bar.layout.display = "none"
        self._ticker: threading.Thread | None = None
        self._stop_ticking = threading.Event()
        super().__init__([self._text, self._bar])
        self.add_class("gpugeek-cost-meter")
        self.refresh()
        if tick_seconds:
            self.start_ticking(tick_seconds)

    def refresh(self, now: float | None = None) -> CostBreakdown:
        """Read the ledger and redraw; returns the breakdown shown."""
        b = pool_cost(self.registry, self.pool_id, now=now, include_idle=False)
        self.breakdown = b
        self.usd_per_hour = b.usd_per_hour_now
        self.usd_so_far = b.total_usd
        self.projected_usd = b.projected_usd(self.projection_hours)
        self.budget_fraction = b.budget_fraction
        if b.budget_fraction is None:
            self.level = "none"
        elif b.budget_fraction >= 1.0:
            self.level = "exceeded"
        elif b.budget_fraction >= BUDGET_WARNING_FRACTION:
            self.level = "warning"
        else:
            self.level = "ok"
        self._render(b)
        return b

    def start_ticking(self, period_seconds: float = 2.0) -> None:
        """Refresh every ``period_seconds`` on a background thread until the pool ends or ``stop_ticking``."""
        if self._ticker is not None and self._ticker.is_alive():
            return
        self._stop_ticking.clear()
        self._ticker = threading.Thread(
            target=self._tick, args=(period_seconds,), name="gpugeek-cost-meter", daemon=True
        )
        self._ticker.start()

    def stop_ticking(self) -> None:
        self._stop_ticking.set()

    @property
    def ticking(self) -> bool:
        return self._ticker is not None and self._ticker.is_alive()

    def close(self) -> None:
        self.stop_ticking()
        super().close()

    @property
    def text(self) -> str:
        """The meter's content as plain text (for logs and tests)."""
        import re

        return " ".join(re.sub(r"<[^>]+>", " ", self._text.value).split())

    def _tick(self, period: float) -> None:
        while not self._stop_ticking.wait(period):
            try:
                if not self.refresh().live:
                    return  # the pool ended: this reading is final
            except Exception as e:  # a locked or missing registry must not kill the kernel's thread
                log.warning("cost meter for pool %s could not refresh: %s", self.pool_id, e)

    def _render(self, b: CostBreakdown) -> None:
        colour = _LEVEL_COLOURS[self.level]
        rows = [
            ("USD per hour now", usd_amount(b.usd_per_hour_now)),
            ("USD so far", usd_amount(b.total_usd)),
        ]
        if b.live:
            rows.append((f"projected, {self.projection_hours:g} h ahead", usd_amount(self.projected_usd)))
        if b.budget_usd:
            left = b.hours_to_budget()
            budget = f"{usd_amount(b.total_usd)} of {usd_amount(b.budget_usd)} ({b.budget_fraction or 0:.0%})"
            if left is not None and b.live:
                budget += f", spent in {left:,.1f} h at this rate"
            rows.append(("budget USD", budget))
            self._bar.layout.display = ""
            self._bar.value = min(1.0, b.budget_fraction or 0.0)
            self._bar.bar_style = {"ok": "success", "warning": "warning", "exceeded": "danger"}[self.level]
        cells = "".join(
            f"<tr><td style='padding:0 12px 0 0;color:var(--jp-ui-font-color1, #3d444d)'>{html.escape(k)}</td>"
            f"<td style='color:{colour if k == 'budget USD' else 'inherit'}'>{html.escape(v)}</td></tr>"
            for k, v in rows
        )
        self._text.value = f"<table class='gpugeek-cost-meter' data-level='{self.level}'>{cells}</table>"
