"""The one line that names the workers of a pool whose software differs from this process's."""

from __future__ import annotations

from gpugeek_jupyter.pools.versions import describe_mismatches, software_versions, versions_probe

HERE = {
    "python": "3.11.7",
    "gpugeek_jupyter": "0.1.0",
    "torch": "2.13.0",
    "cloudpickle": "3.1.3",
    "dask": "2026.8.0",
    "distributed": "2026.8.0",
}


def test_workers_that_run_what_this_process_runs_give_no_line() -> None:
    assert describe_mismatches("dev", HERE, {"tls://a:1": dict(HERE), "tls://b:2": dict(HERE)}) is None


def test_a_worker_with_another_torch_and_gpugeek_is_named_with_both_versions() -> None:
    line = describe_mismatches(
        "dev", HERE, {"tls://a:1": dict(HERE), "tls://b:2": {**HERE, "torch": "2.12.0", "gpugeek_jupyter": "0.0.9"}}
    )
    assert line == (
        "pool 'dev': worker tls://b:2 runs gpugeek_jupyter 0.0.9 (here 0.1.0), torch 2.12.0 (here 2.13.0); "
        "install the same versions there, or expect jobs to fail"
    )


def test_workers_that_differ_alike_are_named_together_and_others_apart() -> None:
    workers = {
        "tls://a:1": {**HERE, "torch": "2.12.0"},
        "tls://c:3": {**HERE, "python": "3.12.1"},
        "tls://b:2": {**HERE, "torch": "2.12.0"},
    }
    line = describe_mismatches("dev", HERE, workers)
    assert line is not None and "\n" not in line
    assert "workers tls://a:1, tls://b:2 run torch 2.12.0 (here 2.13.0)" in line
    assert "worker tls://c:3 runs python 3.12.1 (here 3.11.7)" in line


def test_a_missing_package_reads_none_but_a_missing_gpugeek_is_not_a_mismatch() -> None:
    # a worker without gpugeek_jupyter gets this process's copy at its first job
    workers = {"tcp://a:1": {**HERE, "gpugeek_jupyter": None, "torch": None}}
    assert describe_mismatches("dev", HERE, workers) == (
        "pool 'dev': worker tcp://a:1 runs torch none (here 2.13.0); install the same versions there, or expect jobs to fail"
    )


def test_a_worker_that_could_not_answer_is_left_to_its_job() -> None:
    assert describe_mismatches("dev", HERE, {"tls://a:1": OSError("gone"), "tls://b:2": dict(HERE)}) is None


def test_the_probe_is_sent_by_value_so_a_worker_without_this_package_can_run_it() -> None:
    import json
    import subprocess
    import sys

    import cloudpickle

    blob = cloudpickle.dumps(versions_probe())
    without_the_package = (
        "import sys, pickle, json; sys.modules['gpugeek_jupyter'] = None; "  # importing it now raises ImportError
        "print(json.dumps(pickle.loads(sys.stdin.buffer.read())()))"
    )
    done = subprocess.run([sys.executable, "-c", without_the_package], input=blob, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert json.loads(done.stdout) == software_versions()
