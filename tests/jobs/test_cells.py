"""Cells on a real 2-worker pool (gloo on CPU): results, state shipping, DDP, output, failures."""

from __future__ import annotations

import hashlib
import io
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from gpugeek_jupyter.jobs import run_cell
from gpugeek_jupyter.jobs.logs import JobLogs
from gpugeek_jupyter.store import JobStatus, get_registry


def worker_pids(pool: Any) -> list[int]:
    return sorted(pool.client.run(os.getpid).values())


def notebook(source: str = "") -> dict[str, Any]:
    """A namespace like a notebook's: what ``source`` defines lives in ``__main__``."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(source, namespace)
    return namespace


def test_cell_sees_rank_world_size_device_dist_and_gg(pool: Any) -> None:
    result = run_cell(pool, "(rank, world_size, str(device), dist.get_world_size(), type(gg).__name__)", {})
    assert result.ok and result.values == [(0, 2, "cpu", 2, "Helpers"), (1, 2, "cpu", 2, "Helpers")]


def test_ranks_run_in_worker_processes_forked_from_the_pool_forkserver(pool: Any) -> None:
    cell = "import os, psutil, sys\n(os.getpid(), ' '.join(psutil.Process().cmdline()), 'torch' in sys.modules)"
    result = run_cell(pool, cell, {})
    assert len({pid for pid, _, _ in result.values}) == 2 and os.getpid() not in {pid for pid, _, _ in result.values}
    # never a fork of this process: a fork of the forkserver, a clean interpreter that imported torch
    assert all("multiprocessing.forkserver" in cmdline for _, cmdline, _ in result.values)
    assert all(has_torch for _, _, has_torch in result.values)


def test_a_progress_bar_reaches_a_caller_without_on_progress_as_lines_not_redraws(pool: Any) -> None:
    seen: list[tuple[int, str, str]] = []
    cell = "from tqdm import tqdm\nfor _ in tqdm(range(3), disable=rank != 0, mininterval=0):\n    pass\n"
    assert run_cell(pool, cell, {}, on_output=lambda r, s, t: seen.append((r, s, t))).ok
    bar = "".join(text for rank, stream, text in seen if stream == "stderr")
    assert {rank for rank, _, _ in seen} == {0}
    assert "3/3 100%" in bar and "\r" not in bar and bar.count("\n") == 1, bar


def test_last_expression_comes_back_per_rank_with_tensors_on_cpu(pool: Any) -> None:
    result = run_cell(
        pool, "w = torch.ones(2, requires_grad=True) * (rank + 1)\n{'w': w, 'r': [rank]}", {"torch": torch}
    )
    assert [v["r"] for v in result.values] == [[0], [1]]
    for rank, value in enumerate(result.values):
        assert value["w"].device.type == "cpu" and value["w"].requires_grad and value["w"].grad_fn is None
        assert torch.equal(value["w"], torch.full((2,), float(rank + 1)))
    only_rank0 = run_cell(pool, "rank + 10", {}, rank0=True)
    assert only_rank0.values[0] == 10 and only_rank0.values[1] is None


def test_values_brought_back_keep_requires_grad_and_stay_parameters(pool: Any) -> None:
    result = run_cell(
        pool,
        "net = torch.nn.Linear(2, 1)\nnet.bias.requires_grad_(False)\n"
        "(net.weight, net.bias, torch.ones(1, requires_grad=True), torch.ones(1))",
        {"torch": torch},
    )
    assert result.ok, result.report()
    for weight, bias, leaf, plain in result.values:
        assert isinstance(weight, torch.nn.Parameter) and weight.requires_grad
        assert isinstance(bias, torch.nn.Parameter) and not bias.requires_grad
        assert not isinstance(leaf, torch.nn.Parameter) and leaf.requires_grad
        assert not isinstance(plain, torch.nn.Parameter) and not plain.requires_grad
    torch.nn.Linear(2, 1).weight = result.values[0][0]  # what a Tensor would be refused for


def test_notebook_functions_classes_variables_and_modules_travel(pool: Any) -> None:
    import json

    namespace = notebook(
        "class Scale:\n    def __init__(self, k):\n        self.k = k\n"
        "def apply(s, v):\n    return s.k * v + OFFSET\nOFFSET = 100\n"
    )
    namespace.update(json=json, factor=3)
    result = run_cell(pool, "json.dumps(apply(Scale(factor), rank))", namespace)
    assert result.values == ["100", "103"]


def test_process_group_stays_warm_between_cells(pool: Any) -> None:
    probe = "import os\n(os.environ['MASTER_PORT'], id(dist.group.WORLD))"
    first, second = run_cell(pool, probe, {}), run_cell(pool, probe, {})
    assert first.values == second.values
    run_cell(pool, "raise RuntimeError('x')", {})
    assert run_cell(pool, probe, {}).values == first.values  # no rank called torch.distributed: kept
    run_cell(pool, "dist.barrier()\nraise RuntimeError('x')", {})
    assert run_cell(pool, probe, {}).values == first.values  # every rank stopped past the same barrier: kept
    run_cell(pool, "if rank == 1:\n    raise RuntimeError('x')\ndist.barrier()", {})
    assert run_cell(pool, probe, {}).values != first.values  # rank 0 waited in a barrier rank 1 left: rebuilt


def test_a_cell_that_destroys_the_group_on_some_ranks_has_it_built_again(pool: Any) -> None:
    notices: list[str] = []
    assert run_cell(pool, "dist.barrier()\nkept = rank", {}).ok
    left = run_cell(pool, "if rank == 1:\n    dist.destroy_process_group()", {}, on_notice=notices.append)
    assert left.ok, left.report()
    assert any("rank 1 ended the cell without its process group" in n for n in notices), notices
    after = run_cell(pool, "dist.barrier()\nrank", {}, timeout=60)  # was: both ranks failed, "a peer went away"
    assert after.ok and after.values == [0, 1], after.report()
    lost = run_cell(pool, "kept", {})
    assert not lost.ok and "NameError" in (lost.failure or "")  # went with the group, as a rebuild says
    # every rank leaving it is the user's own teardown: they build it again together, names kept
    assert run_cell(pool, "kept = rank\ndist.destroy_process_group()", {}, on_notice=notices.append).ok
    assert run_cell(pool, "dist.barrier()\nkept", {}, timeout=60).values == [0, 1]
    assert sum("without its process group" in n for n in notices) == 1
    # a cell on one rank next: every rank joins the group again first (it would wait for the others)
    assert run_cell(pool, "dist.destroy_process_group()", {}).ok
    alone = run_cell(pool, "(dist.get_world_size(), kept)", {}, ranks=[0], timeout=60)
    assert alone.ok and alone.values[0] == (2, 0), alone.report()


def test_ddp_steps_match_one_process_on_the_concatenated_batches(pool: Any) -> None:
    torch.manual_seed(1)
    batches = [[(torch.randn(16, 8), torch.randn(16, 4)) for _rank in range(2)] for _step in range(4)]
    cell = (
        "torch.manual_seed(0)\n"
        "model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))\n"
        "ddp = gg.ddp(model)\n"
        "opt = torch.optim.SGD(ddp.parameters(), lr=0.1)\n"
        "snapshots = []\n"
        "for step_batches in batches:\n"
        "    x, y = step_batches[rank]\n"
        "    opt.zero_grad()\n"
        "    torch.nn.functional.mse_loss(ddp(x), y).backward()\n"
        "    opt.step()\n"
        "    snapshots.append([p.detach().clone() for p in model.parameters()])\n"
        "snapshots"
    )
    result = run_cell(pool, cell, {"torch": torch, "batches": batches})
    assert result.ok, result.report()

    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    rank0, rank1 = result.values
    for step, step_batches in enumerate(batches):
        x = torch.cat([b[0] for b in step_batches])
        y = torch.cat([b[1] for b in step_batches])
        opt.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        opt.step()
        for p0, p1, expected in zip(rank0[step], rank1[step], reference.parameters(), strict=True):
            assert torch.equal(p0, p1)
            torch.testing.assert_close(p0, expected.detach(), atol=1e-6, rtol=0)


def test_output_streams_live_labelled_by_rank(pool: Any, tmp_path: Path) -> None:
    go = tmp_path / "go"
    seen: list[tuple[int, str, str]] = []

    def on_output(rank: int, stream: str, text: str) -> None:
        seen.append((rank, stream, text))
        if "waiting" in text and rank == 1:
            go.touch()  # the cell only goes on once its first line has reached us

    cell = (
        "import os, sys, time\n"
        "print('waiting', rank)\n"
        "deadline = time.monotonic() + 60\n"
        "while not os.path.exists(go) and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n"
        "print('err', rank, file=sys.stderr)\n"
        "os.path.exists(go)"
    )
    result = run_cell(pool, cell, {"go": str(go)}, on_output=on_output)
    assert result.values == [True, True]
    assert (1, "stdout", "waiting 1\n") in seen and (0, "stderr", "err 0\n") in seen
    assert result.output == ["waiting 0\nerr 0\n", "waiting 1\nerr 1\n"]


def test_a_last_line_without_its_end_is_never_joined_to_another_ranks(pool: Any) -> None:
    from gpugeek_jupyter.jobs.output import LabelledWriter

    out = io.StringIO()
    writer = LabelledWriter(stdout=out, stderr=out)
    result = run_cell(pool, "import sys\nsys.stdout.write(f'no newline {rank}')", {}, on_output=writer)
    assert result.ok, result.report()
    assert sorted(out.getvalue().splitlines()) == ["[rank 0] no newline 0", "[rank 1] no newline 1"], out.getvalue()


def test_an_unpicklable_name_only_dead_code_reads_is_left_out_with_a_notice(pool: Any, tmp_path: Path) -> None:
    from gpugeek_jupyter.errors import SpecError

    notices: list[str] = []
    with open(tmp_path / "log.txt", "w") as fh:
        result = run_cell(pool, "if False:\n    print(fh)\nrank", {"fh": fh}, on_notice=notices.append)
        assert result.ok and result.values == [0, 1], result.report()
        assert any("'fh' (a TextIOWrapper) cannot be pickled" in notice for notice in notices), notices
        with pytest.raises(SpecError, match=r"cannot send 'fh' \(a TextIOWrapper\) to the workers"):
            run_cell(pool, "if rank == 0:\n    print(fh)", {"fh": fh})  # code that may run: still refused


def test_no_stream_shows_output_at_the_end(pool: Any) -> None:
    seen: list[tuple[int, str]] = []
    result = run_cell(pool, "print('hello', rank)", {}, stream=False, on_output=lambda r, s, t: seen.append((r, t)))
    assert sorted(seen) == [(0, "hello 0\n"), (1, "hello 1\n")]
    assert result.output == ["hello 0\n", "hello 1\n"]


@pytest.mark.timeout(120)
def test_rank_failure_ends_every_rank_and_pool_stays_usable(pool: Any) -> None:
    cell = "t = torch.ones(1)\nif rank == 1:\n    raise ValueError('rank one is broken')\ndist.all_reduce(t)\n"
    result = run_cell(pool, cell, {"torch": torch})
    assert not result.ok and result.failed_rank == 1
    assert "rank 1 (host 127.0.0.1): ValueError: rank one is broken" in result.failure
    assert result.traceback.startswith('Traceback (most recent call last):\n  File "<gpugeek_run cell>", line 3')
    assert "raise ValueError('rank one is broken')" in result.traceback and "rank.py" not in result.traceback
    stopped = result.ranks[0]  # cancelled before its all_reduce, or broken out of it when rank 1 left
    assert stopped.status == "cancelled" or (stopped.status == "failed" and stopped.peer_failure), stopped
    assert run_cell(pool, "t = torch.ones(1)\ndist.all_reduce(t)\nt.item()", {"torch": torch}).values == [2.0, 2.0]


@pytest.mark.timeout(120)
def test_the_failing_ranks_traceback_ends_the_output_tail_the_side_panel_reads(pool: Any) -> None:
    cell = "print('loading', rank)\nif rank == 1:\n    raise ValueError('rank one is broken')\n"
    result = run_cell(pool, cell, {})
    assert not result.ok and result.failed_rank == 1
    tail = JobLogs.grouped_tail(result.job_id).splitlines()
    assert tail == [
        "[ranks 0-1] loading 0, 1",
        "[rank 1] Traceback (most recent call last):",
        '[rank 1]   File "<gpugeek_run cell>", line 3, in <module>',
        "[rank 1]     raise ValueError('rank one is broken')",
        "[rank 1] ValueError: rank one is broken",
    ], tail


@pytest.mark.timeout(120)
def test_killed_worker_is_reported_by_rank_and_host_and_pool_heals(pool: Any) -> None:
    looping = threading.Event()
    before = worker_pids(pool)
    rank1_pid = pool.client.run(os.getpid, workers=[pool.worker_addresses()[1]])
    pid = next(iter(rank1_pid.values()))

    def on_output(rank: int, stream: str, text: str) -> None:
        if "looping" in text and rank == 1:
            looping.set()

    cell = "t = torch.ones(1)\nprint('looping', flush=True)\nwhile True:\n    dist.all_reduce(t)\n"
    outcome: list[Any] = []
    runner = threading.Thread(
        target=lambda: outcome.append(run_cell(pool, cell, {"torch": torch}, on_output=on_output))
    )
    runner.start()
    assert looping.wait(60)
    os.kill(pid, signal.SIGKILL)
    runner.join(60)
    result = outcome[0]
    assert not result.ok and result.failed_rank == 1 and result.ranks[1].status == "died"
    assert f"rank 1 (host 127.0.0.1): its worker process (pid {pid})" in result.failure
    assert result.returncodes[1] == -9 and "killed by signal 9 (SIGKILL)" in result.failure  # as torchrun says it
    healed = run_cell(pool, "t = torch.ones(1)\ndist.all_reduce(t)\nt.item()", {"torch": torch})
    assert healed.values == [2.0, 2.0]
    after = worker_pids(pool)
    assert pid not in after and len(set(after) & set(before)) == 1


@pytest.mark.timeout(120)
def test_worker_lost_between_cells_is_replaced_before_the_next_cell(pool: Any) -> None:
    assert run_cell(pool, "dist.barrier()\nrank", {}).values == [0, 1]
    address = pool.worker_addresses()[1]
    pid = next(iter(pool.client.run(os.getpid, workers=[address]).values()))
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while address in pool.worker_addresses() or len(pool.worker_addresses()) < 2:  # the nanny restarts it
        assert time.monotonic() < deadline
        time.sleep(0.05)
    result = run_cell(pool, "dist.barrier()\nos.getpid()", {"os": os})
    assert result.ok and result.restarts == 0, result.report()
    assert pid not in result.values


@pytest.mark.timeout(120)
def test_hung_barrier_times_out_naming_the_rank_that_had_not_arrived(pool: Any) -> None:
    cell = "import time\nif rank == 1:\n    time.sleep(600)\ndist.barrier()\n"
    result = run_cell(pool, cell, {}, timeout=3)
    assert result.timed_out and result.status is JobStatus.FAILED
    assert (
        "timed out after 3 s: rank 1 had not arrived (rank 1 at line 3: time.sleep(600)); "
        "rank 0 waiting in dist.barrier()" in result.failure
    )
    # where every rank was, grouped, is kept with the result and its record, and shown with it
    assert result.where is not None and result.where.splitlines()[0] == (
        "rank 0 waiting in dist.barrier at line 4; rank 1 at line 3"
    ), result.where
    assert "where the ranks were: rank 0 waiting in dist.barrier" in result.report()
    assert pool.registry.job(result.job_id).summary["where"] == result.where
    assert run_cell(pool, "dist.barrier()\nrank", {}).values == [0, 1]


@pytest.mark.timeout(120)
def test_timeout_stops_python_code_without_restarting_workers(pool: Any) -> None:
    before = worker_pids(pool)
    result = run_cell(pool, "while True:\n    pass\n", {}, timeout=2)
    assert result.timed_out and "no rank was in a collective" in result.failure
    assert [r.status for r in result.ranks] == ["cancelled", "cancelled"]
    assert worker_pids(pool) == before
    assert run_cell(pool, "dist.barrier()\nrank", {}).values == [0, 1]


@pytest.mark.timeout(120)
def test_a_worker_frozen_with_the_gil_held_is_ended_from_outside_at_the_timeout(pool: Any) -> None:
    # ctypes.PyDLL calls C without releasing the GIL: rank 1's whole worker freezes, event loop
    # included, as a C extension deadlocked on the GIL would; it cannot answer, nor end itself
    cell = "import ctypes\nif rank == 1:\n    ctypes.PyDLL(None).sleep(3600)\ndist.barrier()\n"
    before = worker_pids(pool)
    started = time.monotonic()
    result = run_cell(pool, cell, {}, timeout=3)
    took = time.monotonic() - started
    assert result.timed_out and result.status is JobStatus.FAILED, result.report()
    assert took < 30, f"the job took {took:.0f} s to end"
    assert result.ranks[1].status == "killed", result.report()
    assert result.where is not None and "rank 1 not responding" in result.where, result.where
    assert run_cell(pool, "dist.barrier()\nrank", {}).values == [0, 1]  # the pool healed
    assert len(set(worker_pids(pool)) - set(before)) == 1  # the frozen worker was replaced


@pytest.fixture
def interruptible() -> Iterator[None]:
    """SIGINT as KeyboardInterrupt in this process, as a kernel has it: a process started in the
    background by a non-interactive shell (as CI may start the suite) inherits SIGINT ignored, and
    then Python installs no handler and _thread.interrupt_main() does nothing."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.timeout(120)
def test_interrupt_stops_every_rank_and_next_cell_runs(pool: Any, interruptible: None) -> None:
    import _thread

    started = threading.Event()

    def on_output(rank: int, stream: str, text: str) -> None:
        if "spinning" in text:
            started.set()

    sent: list[float] = []

    def interrupt_when_started() -> None:
        if started.wait(60):
            sent.append(time.monotonic())
            _thread.interrupt_main()

    threading.Thread(target=interrupt_when_started, daemon=True).start()
    cell = "t = torch.ones(1)\nprint('spinning', flush=True)\nwhile True:\n    dist.all_reduce(t)\n"
    began = time.monotonic()
    # the job's own timeout ends it if the interrupt is lost, with where every rank was
    result = run_cell(pool, cell, {"torch": torch}, on_output=on_output, timeout=80)
    when = f"interrupt sent {sent[0] - began:.1f} s in" if sent else "no 'spinning' line within 60 s: not interrupted"
    assert result.status is JobStatus.CANCELLED and "interrupted" in result.failure, (when, result.report())
    assert run_cell(pool, "dist.barrier()\nrank", {}).values == [0, 1]


@pytest.mark.timeout(180)
def test_lost_worker_restarts_the_job_with_restart_count(pool: Any) -> None:
    cell = (
        "import os, signal\n"
        "restart = int(os.environ['TORCHELASTIC_RESTART_COUNT'])\n"
        "if restart == 0 and rank == 1:\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "dist.barrier()\n"
        "(restart, os.environ['TORCHELASTIC_MAX_RESTARTS'])"
    )
    notices: list[str] = []
    result = run_cell(pool, cell, {}, max_restarts=2, on_notice=notices.append)
    assert result.ok and result.restarts == 1 and result.values == [(1, "2"), (1, "2")]
    assert len(notices) == 1 and "restarting (1/2)" in notices[0]
    assert get_registry().job(result.job_id).restarts == 1


@pytest.mark.timeout(180)
def test_checkpoint_resumes_a_restarted_job_where_it_stopped(pool: Any, tmp_path: Path) -> None:
    cell = (
        "import os, signal\n"
        "model = gg.ddp(torch.nn.Linear(4, 1))\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "ckpt = gg.checkpoint(directory, model=model, optimizer=opt)\n"
        "start = ckpt.step\n"
        "for step in range(start, 6):\n"
        "    opt.zero_grad()\n"
        "    model(torch.ones(2, 4)).sum().backward()\n"
        "    opt.step()\n"
        "    ckpt.save(step + 1)\n"
        "    if step == 2 and os.environ['TORCHELASTIC_RESTART_COUNT'] == '0' and rank == 1:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "(start, ckpt.step, model.module.weight.detach())"
    )
    result = run_cell(pool, cell, {"torch": torch, "directory": str(tmp_path)}, max_restarts=1)
    assert result.ok and result.restarts == 1, result.report()
    assert [v[:2] for v in result.values] == [(3, 6), (3, 6)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000004.pt", "step-000000005.pt", "step-000000006.pt"]
    saved = torch.load(tmp_path / "step-000000006.pt", weights_only=True)
    assert saved["step"] == 6 and torch.equal(saved["model"]["weight"], result.values[0][2])
    rerun = run_cell(pool, cell, {"torch": torch, "directory": str(tmp_path)})
    assert [v[:2] for v in rerun.values] == [(6, 6), (6, 6)]  # a re-run cell continues where it stopped


def test_amp_runs_the_cell_under_autocast(pool: Any) -> None:
    cell = "a = torch.ones(4, 4)\n(torch.mm(a, a).dtype, gg.scaler.is_enabled())"
    assert run_cell(pool, cell, {"torch": torch}, amp="bf16").values == [(torch.bfloat16, False)] * 2
    assert run_cell(pool, cell, {"torch": torch}, amp="fp16").values == [(torch.float16, True)] * 2
    assert run_cell(pool, cell, {"torch": torch}).values == [(torch.float32, False)] * 2


def test_fsdp_shards_parameters_across_ranks_and_trains(pool: Any) -> None:
    cell = (
        "model = gg.fsdp(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)))\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "model(torch.randn(2, 8)).sum().backward()\n"
        "opt.step()\n"
        "sum(p.to_local().numel() for p in model.parameters())"
    )
    full = 8 * 16 + 16 + 16 * 4 + 4
    assert run_cell(pool, cell, {"torch": torch}).values == [full // 2, full // 2]  # each rank holds half


def test_shard_gives_each_rank_its_own_part_of_the_dataset(pool: Any) -> None:
    cell = "sorted(int(i) for (batch,) in gg.shard((torch.arange(10),), batch_size=3) for i in batch)"
    first, second = run_cell(pool, cell, {"torch": torch}).values
    assert len(first) == len(second) == 5 and sorted(first + second) == list(range(10))


def test_grad_checkpoint_keeps_gradients(pool: Any) -> None:
    cell = (
        "torch.manual_seed(0)\n"
        "net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())\n"
        "x = torch.randn(3, 4)\n"
        "net(x).sum().backward()\n"
        "plain = net[0].weight.grad.clone()\n"
        "net.zero_grad()\n"
        "gg.grad_checkpoint(net)(x).sum().backward()\n"
        "torch.allclose(plain, net[0].weight.grad)"
    )
    assert run_cell(pool, cell, {"torch": torch}).values == [True, True]


def test_jobs_are_recorded_in_the_registry(pool: Any) -> None:
    source = "if rank == 1:\n    raise KeyError('missing')\n"
    result = run_cell(pool, source, {})
    record = get_registry().job(result.job_id)
    assert (record.pool_name, record.kind, record.ranks) == ("jobs", "cell", 2)
    assert record.code_sha256 == hashlib.sha256(source.encode()).hexdigest()
    assert record.status is JobStatus.FAILED and record.rank_exits == [0, 1]
    assert "KeyError: 'missing'" in record.failure_reason
    assert record.ended_at is not None and record.ended_at >= record.started_at
    assert time.time() - record.started_at < 600


def test_a_running_jobs_ranks_read_as_running_and_its_end_gives_their_final_states(pool: Any) -> None:
    from gpugeek_jupyter.jobs.logs import FLUSH_S, JobLogs

    done: dict[str, Any] = {}
    worker = threading.Thread(
        target=lambda: done.update(result=run_cell(pool, f"import time\ntime.sleep({4 * FLUSH_S} if rank else 0)", {}))
    )
    worker.start()
    deadline = time.monotonic() + 30
    running = None
    while running is None and time.monotonic() < deadline:
        job = next((j for j in get_registry().list_jobs(limit=1) if j.status is JobStatus.RUNNING), None)
        if job is not None and JobLogs.states(job.id) == {0: "done", 1: "running"}:
            running = job.id  # a reader in another process (the side panel) sees rank 1 still running
        time.sleep(0.02)
    worker.join(timeout=60)
    assert running is not None and done["result"].ok
    assert JobLogs.states(running) == {0: "done", 1: "done"}
    quick = run_cell(pool, "pass", {})  # a short quiet job: no logs folder, its states in its record
    assert JobLogs.states(quick.job_id) == {0: "done", 1: "done"} and JobLogs.ranks(quick.job_id) == []


@pytest.mark.slow
def test_a_cell_that_calls_torch_compile_runs_again(pool: Any) -> None:
    """Each run compiles the cell anew, as IPython does: a reused code object with a fresh namespace
    would hit torch.compile's cache, whose compiled function lives in the first run's globals."""
    cell = (
        "import torch\nw = torch.ones(3)\nstep = torch.compile(lambda x: (x * w).sum())\nfloat(step(torch.arange(3.0)))"
    )
    for _ in range(2):
        result = run_cell(pool, cell, {})
        assert result.ok, result.report()
        assert result.values == [3.0, 3.0]


def test_output_that_also_travels_with_the_answer_is_shown_once_in_order(pool: Any) -> None:
    """A rank's few words come twice (events, and copies in its answer): each is shown once."""
    from gpugeek_jupyter.jobs.capture import REPLAY_CHARS

    small = "for i in range(3):\n    print(f'line {i} of rank {rank}')"
    shown: list[tuple[int, str]] = []
    for _ in range(20):
        shown.clear()
        result = run_cell(pool, small, {}, on_output=lambda r, s, t: shown.append((r, t)))
        assert result.ok, result.failure
        for rank in (0, 1):
            text = "".join(t for r, t in shown if r == rank)
            assert text == "".join(f"line {i} of rank {rank}\n" for i in range(3)), shown
    big = f"print('x' * {REPLAY_CHARS + 10})\nprint('after', rank)"  # too much to copy: events only
    shown.clear()
    result = run_cell(pool, big, {}, on_output=lambda r, s, t: shown.append((r, t)))
    assert result.ok, result.failure
    for rank in (0, 1):
        assert "".join(t for r, t in shown if r == rank) == "x" * (REPLAY_CHARS + 10) + f"\nafter {rank}\n"


def test_a_job_runs_with_interrupts_kept_out_of_the_import_machinery(pool: Any) -> None:
    """The first job imports lazily in this thread while dask's threads import: its interrupts go
    through :func:`~gpugeek_jupyter.interrupts.interrupts_outside_imports`, only while it runs."""
    from gpugeek_jupyter import interrupts

    handlers: set[Any] = set()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    result = run_cell(pool, "print(rank)", {}, on_output=lambda r, s, t: handlers.add(signal.getsignal(signal.SIGINT)))
    assert result.ok and handlers == {interrupts._interrupt_outside_imports}
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
