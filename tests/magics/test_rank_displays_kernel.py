"""Rich output from the ranks, in a real kernel: a rank's ``display(df)``, IPython's ``HTML`` (also
through IPython's own ``display``, imported in the same cell) and ``plt.show()`` reach the notebook
as display data under a rank label, never as ``<IPython.core.display.HTML object>`` text; grouped
output shows a display the ranks send alike once, labelled for all of them; rank0 shows rank 0's. A rank's
ipywidgets widget is made in the kernel (the real widget protocol's comm_open, parts first) and
follows the rank's changes, a child added after display included."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from support.kernel import CellResult, KernelSession, pool_kernel

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSession]:
    with pool_kernel(tmp_path_factory, "displays") as session:
        yield session


def _run_with_id(kernel: KernelSession, cell: str) -> tuple[str, CellResult]:
    """Run ``cell``, which must not fail; the request's id (to pick out the messages it caused) and its result."""
    msg_id = kernel.execute(cell)
    result = kernel.collect(msg_id, timeout=120)
    assert result.error is None, result.text
    return msg_id, result


def _run(kernel: KernelSession, cell: str) -> CellResult:
    return _run_with_id(kernel, cell)[1]


def _with(result: CellResult, mime: str) -> list[dict[str, Any]]:
    return [d for d in result.displays if mime in d]


def test_a_ranks_dataframe_is_an_html_table_labelled_by_rank(kernel: KernelSession) -> None:
    result = _run(
        kernel, "%%gpugeek_run --output all\nimport pandas as pd\ndisplay(pd.DataFrame({'col': [rank + 40]}))"
    )
    tables = sorted(d["text/html"] for d in _with(result, "text/html"))
    assert len(tables) == 2 and "<table" in tables[0] and "40" in tables[0] and "41" in tables[1], result.displays
    labels = sorted(d["text/plain"] for d in result.displays if len(d) == 1)
    assert labels == ["[rank 0]", "[rank 1]"], result.displays


def test_ipythons_own_display_of_html_imported_in_the_same_cell_is_html(kernel: KernelSession) -> None:
    result = _run(
        kernel,
        "%%gpugeek_run --output all\nfrom IPython.display import HTML, display as show\nshow(HTML(f'<b>r{rank}</b>'))",
    )
    assert sorted(d["text/html"] for d in _with(result, "text/html")) == ["<b>r0</b>", "<b>r1</b>"], result.displays
    assert "IPython.core.display.HTML object" not in result.stdout, result.stdout


def test_plt_show_on_a_rank_sends_its_figure_as_a_png(kernel: KernelSession) -> None:
    pytest.importorskip("matplotlib")
    result = _run(
        kernel, "%%gpugeek_run --output rank0\nimport matplotlib.pyplot as plt\nplt.plot([0, rank + 1])\nplt.show()"
    )
    images = _with(result, "image/png")
    assert len(images) == 1 and images[0]["image/png"].startswith("iVBOR"), result.displays  # rank 0's only
    assert "Figure size" in images[0]["text/plain"] and "Figure" not in result.stdout, result.stdout


def test_grouped_output_shows_a_display_the_ranks_send_alike_once(kernel: KernelSession) -> None:
    result = _run(
        kernel, "%%gpugeek_run --output grouped\nfrom IPython.display import Markdown\ndisplay(Markdown('**same**'))"
    )
    assert len(_with(result, "text/markdown")) == 1, result.displays
    assert {"text/plain": "[ranks 0-1]"} in result.displays, result.displays  # the label, updated in place


def test_each_ranks_hand_written_progress_line_is_redrawn_in_an_area_of_its_own(kernel: KernelSession) -> None:
    cell = (
        "%%gpugeek_run --output all\nimport time\nfor i in range(5):\n"
        "    print(f'\\rstep {i} of 4 on rank {rank}', end='', flush=True)\n    time.sleep(0.15)\nprint()\n"
        "print('done', rank)"
    )
    msg_id, result = _run_with_id(kernel, cell)
    drawings: dict[str, list[str]] = {}  # display id -> what it said, in order
    for msg in _messages_of(kernel, msg_id, "display_data", "update_display_data"):
        display_id = msg["content"].get("transient", {}).get("display_id")
        drawings.setdefault(display_id, []).append(msg["content"]["data"]["text/plain"])
    assert sorted(said[-1] for said in drawings.values()) == [
        "[rank 0] step 4 of 4 on rank 0",
        "[rank 1] step 4 of 4 on rank 1",
    ], drawings
    for said in drawings.values():  # one rank's line per area, redrawn there
        assert len({line.split("]")[0] for line in said}) == 1, said
    assert "step" not in result.stdout, result.stdout  # no rank's redraw lands on the shared line
    assert "[rank 0] done 0\n" in result.stdout and "[rank 1] done 1\n" in result.stdout, result.stdout


def test_a_cells_rich_last_value_is_shown_per_rank_as_itself_not_as_a_list(kernel: KernelSession) -> None:
    result = _run(kernel, "%%gpugeek_run --output all\nimport pandas as pd\npd.DataFrame({'col': [rank + 70]})")
    tables = sorted(d["text/html"] for d in _with(result, "text/html"))
    assert len(tables) == 2 and "70" in tables[0] and "71" in tables[1], result.displays
    labels = sorted(d["text/plain"] for d in result.displays if len(d) == 1)
    assert labels == ["[rank 0]", "[rank 1]"], result.displays
    plain = _run(kernel, "%%gpugeek_run\nrank * 3")  # plain values stay the cell's list
    assert plain.displays[-1]["text/plain"] == "[0, 3]", plain.displays
    kept = _run(kernel, "%%gpugeek_run -o frames\nimport pandas as pd\npd.DataFrame({'col': [rank]})")
    assert not _with(kept, "text/html"), kept.displays  # -o stores them, shows nothing
    assert _run(kernel, "[int(f['col'][0]) for f in frames]").displays[-1]["text/plain"] == "[0, 1]"


def _messages_of(kernel: KernelSession, msg_id: str, *msg_types: str) -> list[dict[str, Any]]:
    """The kernel's messages of these types that the request ``msg_id`` caused, in order."""
    return [m for m in kernel.messages if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] in msg_types]


def _comm_messages(kernel: KernelSession, msg_id: str) -> list[dict[str, Any]]:
    return _messages_of(kernel, msg_id, "comm_open", "comm_msg")


def test_a_ranks_widget_is_made_in_the_kernel_and_follows_the_ranks_changes(kernel: KernelSession) -> None:
    cell = (
        "%%gpugeek_run --output all\nimport time\nimport ipywidgets as w\n"
        "bar = w.IntProgress(value=0, max=4, description=f'rank {rank}')\n"
        "box = w.VBox([bar])\ndisplay(box)\n"
        "for i in range(1, 5):\n    bar.value = i\n    time.sleep(0.05)\n"
        "box.children = [bar, w.Label(f'done on rank {rank}')]\n"
    )
    msg_id, result = _run_with_id(kernel, cell)
    comms = _comm_messages(kernel, msg_id)
    opened = {m["content"]["comm_id"]: m["content"]["data"]["state"] for m in comms if m["msg_type"] == "comm_open"}
    bars = {cid: s for cid, s in opened.items() if s.get("_model_name") == "IntProgressModel"}
    assert sorted(s["description"] for s in bars.values()) == ["rank 0", "rank 1"], opened
    finals = {cid: s["value"] for cid, s in bars.items()}
    for m in comms:  # the rank's changes, sent on by ipywidgets as updates of the kernel's widget
        data = m["content"]["data"]
        if m["msg_type"] == "comm_msg" and data.get("method") == "update" and m["content"]["comm_id"] in finals:
            finals[m["content"]["comm_id"]] = data["state"].get("value", finals[m["content"]["comm_id"]])
    assert sorted(finals.values()) == [4, 4], (finals, comms)
    labels = sorted(s["value"] for s in opened.values() if s.get("_model_name") == "LabelModel")
    assert labels == ["done on rank 0", "done on rank 1"], opened  # a child added after display
    views = [
        d["application/vnd.jupyter.widget-view+json"]["model_id"]
        for d in _with(result, "application/vnd.jupyter.widget-view+json")
    ]
    boxes = {cid for cid, s in opened.items() if s.get("_model_name") == "VBoxModel"}
    assert sorted(views) == sorted(boxes) and len(boxes) == 2, (views, opened)
    for cid in boxes:  # each box holds its own rank's bar, by this kernel's model id
        assert opened[cid]["children"][0].removeprefix("IPY_MODEL_") in bars, opened[cid]
    assert "IntProgress(" not in result.stdout and "VBox(" not in result.stdout, result.stdout
