"""How a job's output reads at many ranks: grouped lines, rank 0 only, and full logs on disk."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from gpugeek_jupyter.config import GpugeekConfig, set_config
from gpugeek_jupyter.errors import SpecError
from gpugeek_jupyter.jobs.logs import JobLogs, job_log_path, wait_for_housekeeping
from gpugeek_jupyter.jobs.output import (
    GroupedWriter,
    LabelledWriter,
    RankZeroWriter,
    output_writer,
    rank_ranges,
    resolve_output_mode,
)


class FakeClock:
    """A clock the test moves by hand (the grouping window is time-based)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def grouped(world_size: int = 8) -> tuple[GroupedWriter, io.StringIO, FakeClock]:
    out, clock = io.StringIO(), FakeClock()
    return GroupedWriter(world_size, stdout=out, stderr=out, window=0.1, clock=clock), out, clock


def test_a_line_every_rank_prints_is_shown_once_with_the_ranks_as_a_range() -> None:
    writer, out, _ = grouped(8)
    for rank in range(8):
        writer(rank, "stdout", "epoch 3: loss 0.41\n")
    assert out.getvalue() == "[ranks 0-7] epoch 3: loss 0.41\n"  # complete: shown without waiting


def test_lines_alike_but_for_the_ranks_own_number_are_one_line_that_says_each_ranks_number() -> None:
    writer, out, _ = grouped(4)
    for rank in range(4):
        writer(rank, "stdout", f"rank {rank} of 4 ready, loss 0.{rank}5\n")
    writer.close()
    # "0.05" on rank 0 is not the rank number: only whole numbers count, so the lines differ there
    assert out.getvalue().splitlines() == [f"[rank {r}] rank {r} of 4 ready, loss 0.{r}5" for r in range(4)]
    writer, out, _ = grouped(4)
    for rank in range(4):
        writer(rank, "stdout", f"rank {rank} of 4 ready\n")
    assert out.getvalue() == "[ranks 0-3] rank 0..3 of 4 ready\n"


def test_done_on_each_rank_reads_as_what_the_ranks_said_never_a_placeholder() -> None:
    writer, out, _ = grouped(4)
    for rank in range(4):
        writer(rank, "stdout", f"done on {rank}\n")
    assert out.getvalue() == "[ranks 0-3] done on 0..3\n"
    writer, out, _ = grouped(8)
    for rank in (0, 1, 5, 2, 3, 7):
        writer(rank, "stdout", f"done on {rank}\n")
    writer.close()
    assert out.getvalue() == "[ranks 0-3,5,7] done on 0..3, 5, 7\n"
    assert "{rank}" not in out.getvalue() and "\x00" not in out.getvalue()


def test_a_rank_that_printed_another_ranks_number_is_not_shown_as_saying_its_own() -> None:
    writer, out, _ = grouped(3)
    writer(1, "stdout", "got 1\n")
    writer(0, "stdout", "got 1\n")  # the same line: rank 0 said 1, not its own number
    writer(2, "stdout", "got 2\n")  # alike but for its rank, yet the group now holds a rank that said 1
    writer.close()
    assert out.getvalue().splitlines() == ["[ranks 0-1] got 1", "[rank 2] got 2"]


def test_a_line_is_shown_at_once_when_every_missing_rank_has_printed_a_later_line() -> None:
    writer, out, _ = grouped(3)  # the clock does not move: no window runs out
    writer(0, "stdout", "only rank 0 says this\n")
    writer(1, "stdout", "next\n")
    assert out.getvalue() == ""  # rank 2 may still print it
    writer(2, "stdout", "next\n")
    assert out.getvalue() == "[rank 0] only rank 0 says this\n"


def test_copies_that_come_after_their_line_was_shown_widen_the_window_up_to_its_bound() -> None:
    writer, out, clock = grouped(4)
    writer(0, "stdout", "step 0\n")
    clock.now += 0.3  # a loaded machine: the other ranks' copies come 0.3 s later, past the 0.1 s window
    writer(1, "stdout", "")  # output without a line: the due line is shown, as the timer would
    for rank in (1, 2, 3):
        writer(rank, "stdout", "step 0\n")
    assert writer.window == pytest.approx(0.45)  # 1.5 times the lateness seen
    for step in range(1, 4):  # from now on one step's copies 0.3 s apart stay one line
        writer(0, "stdout", f"step {step}\n")
        clock.now += 0.3
        writer(1, "stdout", "")
        for rank in (1, 2, 3):
            writer(rank, "stdout", f"step {step}\n")
    assert out.getvalue().splitlines() == ["[rank 0] step 0", "[ranks 1-3] step 0"] + [
        f"[ranks 0-3] step {step}" for step in range(1, 4)
    ]
    writer(0, "stdout", "saving\n")
    clock.now += 30.0  # copies 30 s late: the window stops at its bound
    writer(1, "stdout", "")
    writer(1, "stdout", "saving\n")
    assert writer.window == writer.max_window == 1.0
    writer(2, "stdout", "only rank 2\n")
    clock.now += 1.01  # no line waits longer than max_window
    writer(2, "stdout", "")
    writer.close()
    assert out.getvalue().splitlines()[-3:] == ["[rank 0] saving", "[rank 1] saving", "[rank 2] only rank 2"]


def test_a_number_equal_to_one_ranks_id_does_not_split_an_identical_line() -> None:
    writer, out, _ = grouped(2)
    writer(0, "stdout", "epoch 0: done\n")
    writer(1, "stdout", "epoch 0: done\n")
    assert out.getvalue() == "[ranks 0-1] epoch 0: done\n"


def test_distinct_lines_keep_their_rank_label_and_each_ranks_order() -> None:
    writer, out, clock = grouped(3)
    writer(0, "stdout", "a\nb\n")
    writer(1, "stdout", "b\n")  # rank 1 printed b first: it joins b, not a
    writer(1, "stdout", "a\n")
    writer(2, "stdout", "a\nb\n")
    clock.now += 0.2
    writer.close()
    lines = out.getvalue().splitlines()
    assert lines == ["[ranks 0,2] a", "[ranks 0-2] b", "[rank 1] a"]
    for rank in (0, 1, 2):  # each rank's own lines appear in the order it printed them
        own = [line.split("] ", 1)[1] for line in lines if _has_rank(line, rank)]
        assert own == (["b", "a"] if rank == 1 else ["a", "b"])


def _has_rank(line: str, rank: int) -> bool:
    label = line[1 : line.index("]")].split(" ", 1)[1]
    ranks: set[int] = set()
    for span in label.split(","):
        first, _, last = span.partition("-")
        ranks.update(range(int(first), int(last or first) + 1))
    return rank in ranks


def test_a_line_only_some_ranks_print_is_shown_within_the_window_without_more_output() -> None:
    out = io.StringIO()
    writer = GroupedWriter(8, stdout=out, stderr=out, window=0.1)  # the real clock and the timer
    started = time.monotonic()
    writer(0, "stdout", "only rank 0 says this\n")
    while "only rank 0" not in out.getvalue() and time.monotonic() - started < 5:
        time.sleep(0.01)
    waited = time.monotonic() - started
    assert out.getvalue() == "[rank 0] only rank 0 says this\n"
    assert waited < 1.0, waited  # shown by the window's timer (0.1 s), not held until the job ends
    writer.close()


def test_carriage_returns_keep_the_last_drawing_and_partial_lines_wait_for_their_end() -> None:
    writer, out, _ = grouped(2)
    writer(0, "stderr", "10%\r50%\r")
    writer(0, "stderr", "100%\n")
    writer(1, "stderr", "100%")
    assert out.getvalue() == ""  # rank 0's line waits (window) for rank 1's; rank 1 has no line end yet
    writer.close()
    assert out.getvalue() == "[ranks 0-1] 100%\n"


def test_stdout_and_stderr_are_grouped_apart() -> None:
    out, err = io.StringIO(), io.StringIO()
    writer = GroupedWriter(2, stdout=out, stderr=err, clock=FakeClock())
    writer(0, "stdout", "x\n")
    writer(1, "stderr", "x\n")
    writer.close()
    assert (out.getvalue(), err.getvalue()) == ("[rank 0] x\n", "[rank 1] x\n")


def test_rank0_mode_shows_rank_zero_only() -> None:
    out = io.StringIO()
    writer = RankZeroWriter(stdout=out, stderr=out)
    writer(1, "stdout", "from 1\n")
    writer(0, "stdout", "from 0\n")
    assert out.getvalue() == "[rank 0] from 0\n"


def test_auto_mode_groups_beyond_two_ranks_and_a_bad_mode_is_named() -> None:
    assert resolve_output_mode(None, 2) == "all" and resolve_output_mode("auto", 3) == "grouped"
    assert isinstance(output_writer("all", 8), LabelledWriter)
    assert isinstance(output_writer(None, 8), GroupedWriter)
    with pytest.raises(SpecError) as error:
        resolve_output_mode("loud", 2)
    assert "'loud'" in str(error.value) and "grouped" in str(error.value)


def test_rank_ranges_compress_runs() -> None:
    assert rank_ranges([5, 0, 1, 2, 3, 7]) == "0-3,5,7"


def test_job_logs_keep_every_ranks_output_on_disk_with_start_and_end_when_long(tmp_path: Path) -> None:
    set_config(GpugeekConfig(job_logs_dir=str(tmp_path), job_log_bytes=2000, job_logs_keep=3))
    try:
        logs = JobLogs("job-long")
        for step in range(1000):
            logs.write(0, f"step {step:04d}\n")  # 10 characters a line: 10,000 in all
        logs.write(1, "rank one\n")
        logs.close()
        text = JobLogs.read("job-long", 0)
        assert text.startswith("step 0000\n") and text.endswith("step 0999\n")
        assert "characters left out" in text and len(text) < 2200
        assert JobLogs.read("job-long", 1) == "rank one\n"
        assert JobLogs.ranks("job-long") == [0, 1]
        assert logs.text(0).startswith("step 0000") and len(logs.text(0)) == 10_000  # memory keeps it all
        for n in range(4):  # only the newest 3 jobs' logs stay
            newer = JobLogs(f"job-{n}")
            newer.write(0, "hello\n")
            newer.close()
        wait_for_housekeeping(timeout=10)  # the old ones are removed off the jobs' path
        kept = sorted(p.name for p in tmp_path.iterdir())
        assert len(kept) == 3 and "job-long" not in kept and "job-3" in kept
        assert not job_log_path("job-long", 0).exists()
    finally:
        set_config(None)


def test_a_running_jobs_log_can_be_read_with_its_newest_part_and_ends_whole(tmp_path: Path) -> None:
    set_config(GpugeekConfig(job_logs_dir=str(tmp_path), job_log_bytes=4000))
    try:
        logs = JobLogs("job-live")
        for step in range(1000):
            logs.write(0, f"step {step:04d}\n")
        logs._ranks[0].flush()  # what the half-second flush does
        live = JobLogs.read("job-live", 0)  # another process reading while the job runs
        assert live.startswith("step 0000\n") and live.endswith("step 0999\n"), live[-40:]
        assert "left out while the job runs" in live and len(live) < 4200
        logs.close()
        ended = JobLogs.read("job-live", 0)
        assert ended.startswith("step 0000\n") and ended.endswith("step 0999\n") and "characters left out" in ended
        assert sorted(p.name for p in (tmp_path / "job-live").iterdir()) == ["rank-0.log"]  # segments folded in
    finally:
        set_config(None)


def test_ranks_states_and_a_grouped_tail_are_readable_by_another_process(tmp_path: Path) -> None:
    set_config(GpugeekConfig(job_logs_dir=str(tmp_path)))
    try:
        logs = JobLogs("job-tail")
        logs.set_states({0: "running", 1: "running", 2: "running"})
        for rank in range(3):
            logs.write(rank, "loading\n")
            logs.write(rank, f"epoch 1: loss 0.5\nrank {rank} done\n" if rank != 2 else "Traceback: boom\n")
        logs.set_states({2: "failed"})
        logs.close()
        assert JobLogs.states("job-tail") == {0: "running", 1: "running", 2: "failed"}
        # each rank's lines in its order; rank 2's own line right after its previous one
        assert JobLogs.grouped_tail("job-tail", lines=10).splitlines() == [
            "[ranks 0-2] loading",
            "[rank 2] Traceback: boom",
            "[ranks 0-1] epoch 1: loss 0.5",
            "[ranks 0-1] rank 0, 1 done",
        ]
        assert JobLogs.states("job-none") == {} and JobLogs.grouped_tail("job-none") == ""
    finally:
        set_config(None)


def test_a_grouped_tail_groups_ranks_whose_windows_start_a_line_apart(tmp_path: Path) -> None:
    set_config(GpugeekConfig(job_logs_dir=str(tmp_path)))
    try:
        logs = JobLogs("job-offset")
        for i in range(50):
            logs.write(0, f"tick {i}\n")
        for i in range(49):  # rank 1 is one line behind
            logs.write(1, f"tick {i}\n")
        logs.close()
        tail = JobLogs.grouped_tail("job-offset", lines=5).splitlines()
        assert tail == [f"[ranks 0-1] tick {i}" for i in range(45, 49)] + ["[rank 0] tick 49"], tail
    finally:
        set_config(None)


def test_job_logs_are_pruned_at_a_constant_cost_and_other_processes_jobs_count_at_the_next_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpugeek_jupyter.jobs import logs as job_logs

    monkeypatch.setattr(job_logs, "PRUNE_LISTING_JOBS", 3)
    listings: list[Path] = []
    list_folder = job_logs._Pruner._list
    # only this folder's listings count: an earlier test's jobs may still be pruned in their own folder
    monkeypatch.setattr(
        job_logs._Pruner,
        "_list",
        lambda self: (listings.append(self.root) if Path(self.root) == tmp_path else None, list_folder(self))[1],
    )
    set_config(GpugeekConfig(job_logs_dir=str(tmp_path), job_logs_keep=4))
    try:

        def job(name: str) -> None:
            logs = JobLogs(name)
            logs.write(0, "hello\n")
            logs.close()
            wait_for_housekeeping(timeout=10)

        for n in range(3):
            job(f"job-{n}")
        (tmp_path / "job-other").mkdir()  # another kernel's job, unknown to this process until it lists
        job("job-3")
        assert len(listings) == 1  # at the first job only: three jobs after it cost no listing
        assert sorted(p.name for p in tmp_path.iterdir()) == ["job-0", "job-1", "job-2", "job-3", "job-other"]
        job("job-4")  # the listing after 3 jobs counts the other kernel's job: the 2 oldest go
        assert len(listings) == 2
        assert sorted(p.name for p in tmp_path.iterdir()) == ["job-2", "job-3", "job-4", "job-other"]
    finally:
        set_config(None)


def test_a_quiet_short_job_makes_no_folder_and_its_states_come_from_its_record(tmp_path: Path) -> None:
    from gpugeek_jupyter.pricing import prices_in_force
    from gpugeek_jupyter.spec import PoolSpec
    from gpugeek_jupyter.store import JobStatus, get_registry

    set_config(GpugeekConfig(job_logs_dir=str(tmp_path)))
    try:
        logs = JobLogs("job-quiet")
        logs.set_states({0: "running", 1: "running"}, write=False)  # not written: the job ended at once
        logs.set_states({0: "done", 1: "failed"}, write=False)
        logs.close()
        wait_for_housekeeping(timeout=10)
        assert list(tmp_path.iterdir()) == [] and JobLogs.states("job-quiet") == {}
        registry = get_registry()
        spec = PoolSpec.create(gpu_type="cpu", count=2, backend="local", name="dev")
        pool = registry.add_pool(spec.name, spec.backend, spec.to_dict(), prices_in_force(spec), owner="kernel 1")
        registry.add_job("job-quiet", pool.id, "dev", "cell", "ab" * 32, ranks=2)
        summary = {"states": {"0": "done", "1": "failed"}}
        registry.finish_job("job-quiet", JobStatus.FAILED, 0, [0, 1], "rank 1 failed", summary)
        assert JobLogs.states("job-quiet") == {0: "done", 1: "failed"}
    finally:
        set_config(None)
