"""Jobs that outlive the notebook: kept pools and detached jobs, owned by a per-user agent.

The agent is a process of the user's own, started on demand by the first kernel, script or server
that needs it (:mod:`.connection`), in a session of its own, reached over a Unix socket in the
user's private runtime folder. It owns *kept* pools (``%gpugeek_launch --keep``), so they survive
the kernel, the browser and the Jupyter server, and runs *detached* jobs on them
(``%%gpugeek_run --detach``, ``job.submit(...)``) through the same job agent as attached jobs;
each job's output is kept as one ordered stream (:mod:`.stream`) that ``%gpugeek_attach`` replays
and follows, and its result on disk (:mod:`.results`). It exits by itself after
``GpugeekConfig.agent_idle_seconds`` with no kept pool and no detached job.

Layers: above ``jobs`` and ``pools`` (it composes them, as ``runtime`` does), below the adapters.

>>> pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name="train", keep=True)   # doctest: +SKIP
>>> handle = submit_request(pool, script_request("train.py"))                            # doctest: +SKIP
>>> gpugeek_jupyter.job(handle.id).wait().result().values                               # doctest: +SKIP
"""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING

from ..errors import ConflictError, GpugeekError, PerSurface, Phrase, Value
from .handle import JobHandle, job

if TYPE_CHECKING:
    from ..jobs.request import JobRequest
    from ..pools import Pool
    from ..spec import PoolSpec

__all__ = ["JobHandle", "is_kept", "job", "keep_pool", "launch_kept", "submit_request"]


def launch_kept(spec: PoolSpec) -> Pool:
    """Have the agent launch a pool for ``spec`` (starting the agent if need be); the pool, attached
    here and made current. It ends by a stop, idle shutdown, budget or walltime, not with this process."""
    from ..runtime import get_pool_manager
    from .connection import connect

    manager = get_pool_manager()
    manager.ensure_name_free(spec.name)
    answer = connect().launch(spec.to_dict())
    if "error" in answer:
        raise GpugeekError(answer["error"])
    pool: Pool = manager.use(answer["name"])
    return pool


def is_kept(pool: Pool) -> bool:
    """Whether ``pool`` is owned by the agent (so it outlives the process that uses it)."""
    from .service import AGENT_OWNER

    return pool.registry.pool_by_id(pool.id).owner.startswith(AGENT_OWNER)


def keep_pool(pool: Pool) -> tuple[Pool, str | None]:
    """Pool ``pool`` owned by the agent, so that a detached job on it outlives this process; and
    the line that says what was done, when something was.

    A kept pool is itself. A pool this process launched is launched again by the agent with the
    same options (its workers are this process's children, so they cannot change hands): the job
    then runs on fresh workers, and what the old ones held is gone. Refused while a job runs or
    waits on it (launching it again would end that job), and for a pool another process owns.
    """
    if is_kept(pool):
        return pool, None
    from ..runtime import get_pool_manager

    manager = get_pool_manager()
    if not pool.owned:
        raise ConflictError(
            Phrase(
                "pool {name} belongs to another process ({owner}) and ends with it, and a detached job with it; {how}",
                name=Value(pool.name),
                owner=pool.registry.pool_by_id(pool.id).owner,
                how=_KEPT_HOW,
            )
        )
    open_jobs = pool.registry.open_jobs(pool.id)
    if open_jobs:
        raise ConflictError(
            Phrase(
                "pool {name} is busy with {job} ({status}): a detached job would launch it again under "
                "the agent, which ends that job; wait for it, or {how}",
                name=Value(pool.name),
                job=open_jobs[0].id,
                status=open_jobs[0].status.value,
                how=_KEPT_HOW,
            )
        )
    spec = pool.spec
    manager.stop(pool.name, reason="launched again by the gpugeek agent, to be kept")
    try:
        kept = launch_kept(spec)
    except GpugeekError as e:
        raise GpugeekError(
            f"pool '{spec.name}' was stopped to be launched again by the gpugeek agent, and that launch failed: {e}"
        ) from e
    workers = f"{spec.count} x {spec.gpu_type}"
    return kept, (
        f"pool '{spec.name}' is kept now: the agent launched it again ({workers}), so it and the job "
        "outlive this process; what its old workers held is gone"
    )


_KEPT_HOW = PerSurface(
    core="run detached jobs on a kept pool",
    magic="run detached jobs on a kept pool: %gpugeek_launch --keep ...",
    python="run detached jobs on a kept pool: gpugeek_jupyter.launch(..., keep=True)",
)


def submit_request(pool: Pool, request: JobRequest) -> JobHandle:
    """Run ``request`` on kept pool ``pool`` without waiting for it; its handle (see
    :func:`keep_pool` for a pool that is not kept yet)."""
    from .connection import connect

    if not is_kept(pool):
        raise ConflictError(
            Phrase(
                "pool {name} ends with the process that launched it, and a detached job with it; {how}",
                name=Value(pool.name),
                how=_KEPT_HOW,
            )
        )
    from ..jobs.pool_queue import this_submitter

    request.submitted_by = request.submitted_by or this_submitter().label
    answer = connect().submit(pool.name, pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL))
    if "error" in answer:
        raise GpugeekError(answer["error"])
    return JobHandle(answer["job_id"])
