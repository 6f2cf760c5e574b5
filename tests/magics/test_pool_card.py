"""The pool card tells the pool's state now: no workers ready and no dashboard once it stops."""

from __future__ import annotations

from gpugeek_jupyter.spec import PoolSpec
from gpugeek_jupyter.widgets.pool_card import PoolCard


def _ready_card() -> PoolCard:
    card = PoolCard(PoolSpec.create(gpu_type="cpu", count=4, backend="local", name="dev"), usd_per_hour=0.2)
    card.set_running("gpugeek/pools/dev/dashboard/status", 0.2)
    assert "4/4 workers ready" in card.text and "dashboard" in card.text
    return card


def test_a_stopping_pool_shows_no_workers_ready_and_no_dashboard_link() -> None:
    card = _ready_card()
    card.set_status("stopping")
    assert "stopping" in card.text and "shutting down 4 workers" in card.text
    assert "workers ready" not in card.text and "dashboard" not in card.text


def test_an_ended_pool_says_it_has_no_workers_left_and_links_nowhere() -> None:
    for status in ("stopped", "failed", "lost"):
        card = _ready_card()
        card.set_status(status)
        assert f"none left (pool {status})" in card.text
        assert "workers ready" not in card.text and "dashboard" not in card.text and "<a " not in card._body.value
