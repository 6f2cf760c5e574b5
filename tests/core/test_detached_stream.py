"""A detached job's event stream on disk: bounded by job_log_bytes with one notice saying so, whole
lines only (a line its dead writer left half-written is dropped by the next writer), numbering that
goes on across writers, and the end line last with the failing rank's traceback."""

from __future__ import annotations

import json

from gpugeek_jupyter.detached.stream import StreamWriter, follow, read_events, stream_path


def test_past_the_limit_output_is_dropped_with_one_notice_while_progress_and_the_end_still_come() -> None:
    writer = StreamWriter("job-0000000a", limit=200)
    for i in range(20):
        writer.output(i % 2, "stdout", f"line {i} of a chatty job\n")
    writer.progress(0, {"desc": "train", "n": 20, "total": 20})
    writer.end("succeeded", None)

    events = read_events("job-0000000a", limit=1000)
    kinds = [e["kind"] for e in events]
    outputs = [e for e in events if e["kind"] == "out"]
    notices = [e["text"] for e in events if e["kind"] == "notice"]
    assert 0 < len(outputs) < 20
    assert notices == [
        "the replay of this job's output stops here: it passed job_log_bytes (200 bytes); "
        "every rank's full log keeps its start and end (%gpugeek_logs)"
    ]
    assert kinds[-2:] == ["progress", "end"]
    assert [e["seq"] for e in events] == list(range(len(events)))


def test_a_new_writer_drops_a_half_written_line_and_numbers_on_from_the_last_whole_one() -> None:
    first = StreamWriter("job-0000000b")
    first.output(0, "stdout", "epoch 1\n")
    first.output(1, "stdout", "epoch 1\n")
    first.close()
    path = stream_path("job-0000000b")
    with path.open("a", encoding="utf-8") as file:  # its writer died in the middle of a line
        file.write('{"seq":2,"at":1.0,"rank":0,"kind":"out","stre')

    second = StreamWriter.resume("job-0000000b")
    assert second.last_at > 0
    second.output(0, "stdout", "epoch 2\n")
    second.end("failed", "rank 1 raised", failed_rank=1, traceback="Traceback ...\nValueError: bad batch\n")

    lines = path.read_text(encoding="utf-8").splitlines()
    events = [json.loads(line) for line in lines]  # every line whole: each one parses
    assert [(e["seq"], e["kind"], e.get("text")) for e in events] == [
        (0, "out", "epoch 1\n"),
        (1, "out", "epoch 1\n"),
        (2, "out", "epoch 2\n"),
        (3, "end", None),
    ]
    assert list(follow("job-0000000b", since=2)) == events[2:]
    assert events[-1]["failed_rank"] == 1 and events[-1]["traceback"].endswith("ValueError: bad batch\n")


def test_a_follower_told_the_job_ended_still_reads_the_end_line_written_just_after() -> None:
    """The job's row turns final a moment before its agent writes the end line (with the failing
    rank's traceback): a follower that stopped at the row missed the traceback now and then."""
    import threading
    import time

    writer = StreamWriter("job-0000000c")
    writer.output(1, "stdout", "before\n")
    late = threading.Timer(
        0.3, writer.end, ("failed", "rank 1 raised"), {"failed_rank": 1, "traceback": "ZeroDivisionError\n"}
    )
    late.start()
    events = list(follow("job-0000000c", keep_following=lambda: False, poll=0.05))
    late.join()
    assert [e["kind"] for e in events] == ["out", "end"] and events[-1]["traceback"] == "ZeroDivisionError\n"

    gone = StreamWriter("job-0000000d")  # an agent that died writes no end line: the follower still ends
    gone.output(0, "stdout", "last words\n")
    started = time.monotonic()
    assert [e["kind"] for e in follow("job-0000000d", keep_following=lambda: False, poll=0.05)] == ["out"]
    assert time.monotonic() - started < 5.0
