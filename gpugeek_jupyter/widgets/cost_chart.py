"""The cost report as a bokeh chart (the notebook side of :mod:`gpugeek_jupyter.cost.tco`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bokeh.plotting import figure as Figure

    from ..cost.ledger import CostBreakdown


def bar_chart(breakdowns: list[CostBreakdown], title: str = "Cost by pool and job (USD)") -> Figure:
    """A bokeh stacked bar chart per pool and job: compute (busy, idle, and unsampled: time no
    utilization sample covered), storage and network."""
    from bokeh.models import BasicTickFormatter, ColumnDataSource, FactorRange, HoverTool
    from bokeh.plotting import figure

    labels = [f"{b.pool_name} / {b.job_id}" if b.job_id else b.pool_name for b in breakdowns]
    labels = _unique(labels)
    parts = ["busy compute", "idle compute", "unsampled compute", "storage", "network"]
    data: dict[str, list[Any]] = {"label": labels}
    data["busy compute"] = [b.busy_usd for b in breakdowns]
    data["idle compute"] = [min(b.idle_usd, b.compute_usd) for b in breakdowns]
    data["unsampled compute"] = [b.unsampled_usd or 0.0 for b in breakdowns]
    data["storage"] = [b.storage_usd for b in breakdowns]
    data["network"] = [b.network_usd for b in breakdowns]
    data["total"] = [b.total_usd for b in breakdowns]
    source = ColumnDataSource(data)
    fig = figure(
        x_range=FactorRange(factors=labels),
        height=320,
        width=max(560, 90 * len(labels) + 160),  # the legend's column on the right
        title=title,
        toolbar_location=None,
    )
    fig.vbar_stack(
        parts,
        x="label",
        width=0.7,
        source=source,
        color=["#1a7f37", "#d4a72c", "#8c959f", "#0969da", "#8250df"],
        legend_label=parts,
    )
    fig.add_tools(
        HoverTool(
            tooltips=[
                ("", "@label"),
                ("total USD", "@total{0,0.00[0000]}"),
                ("idle USD", "@{idle compute}{0,0.00[0000]}"),
            ]
        )
    )
    fig.yaxis.axis_label = "USD"
    # plain decimals: a young pool's 0.00015 USD, not bokeh's 1.500e-4
    fig.yaxis.formatter = BasicTickFormatter(use_scientific=False)
    fig.xaxis.major_label_orientation = 0.6 if len(labels) > 4 else 0.0
    # beside the bars, not over them (inside, the legend covered the first pool's bar)
    legend = fig.legend[0]
    fig.center = [item for item in fig.center if item is not legend]
    fig.add_layout(legend, "right")
    legend.location = "top_left"
    from .theme import apply_palette, palette

    return apply_palette(fig, palette())


def _unique(labels: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} ({seen[label]})")
    return out
