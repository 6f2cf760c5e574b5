"""The jobs' one door to dask: calls to a pool's workers, their answers, events, restarts.

Everything else in :mod:`gpugeek_jupyter.jobs` speaks to workers through :class:`PoolTransport`, so
this is the only module that knows how dask carries a call. A rank is started with the worker's own
``run`` handler (the one ``client.run`` reaches through the scheduler) called directly on the
worker, one hop less each way, and through the scheduler when this process cannot reach the worker
(a pool attached across networks); after that first call the worker serves it under a handler of
its own (:func:`answers_directly`), without ``run``'s work around each call. Output and failures travel as dask events
(``Worker.log_event`` / ``Client.subscribe_topic``); the scheduler's ``remove-worker`` event on a
worker's own topic says at once that it died. Only the pool's ``Client`` is needed, never the cluster
object: the same code drives a pool this process launched and one attached by address.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import pickle
import secrets
import threading
from collections.abc import Callable
from typing import Any

from ..polling import wait_for
from ..pools.scheduler_workers import connected_workers
from .events import Events, RankAnswered

log = logging.getLogger(__name__)

DIRECT_CONNECT_S = 5.0  # a worker not reachable within this is called through the scheduler
SUBSCRIBE_CONFIRM_S = 10.0  # how long a new subscription may take to deliver its probe
LAUNCH_SENT_S = 1.0  # how long a launch waits for the event loop to send the ranks' requests

EventHandler = Callable[[dict[str, Any]], None]


class WorkerGone(ConnectionError):
    """A worker could not be reached to start the job: it went away since the last job."""


def is_comm_error(error: BaseException) -> bool:
    """The call failed on the way (the worker went away), not in the called function."""
    from distributed.comm.core import CommClosedError

    return isinstance(error, CommClosedError | OSError | asyncio.TimeoutError)


def lacks_package(answer: Any) -> bool:
    """The worker could not even load our function (dask passes the error on as its text)."""
    return isinstance(answer, Exception) and "No module named 'gpugeek_jupyter" in str(answer)


def _post_answer(events: Events, address: str, future: Any) -> None:
    try:
        answer = future.result()
    except BaseException as e:  # the worker died, or could not be reached at all
        answer = e
    events.put(RankAnswered(address, answer))


@functools.lru_cache(maxsize=8)
def _pickled_function(function: Callable[..., Any]) -> bytes:
    """``function`` as dask's ``run`` handler takes it (a module-level function: pickled by name)."""
    from distributed.protocol.pickle import dumps

    return dumps(function)  # type: ignore[no-any-return]


_NO_KWARGS = pickle.dumps({}, protocol=pickle.HIGHEST_PROTOCOL)


def _small(blobs: tuple[bytes, ...]) -> bool:
    """Whether a request of these pickles is far below the size dask packs on another thread."""
    from distributed.comm.utils import OFFLOAD_THRESHOLD

    return not OFFLOAD_THRESHOLD or sum(map(len, blobs)) < OFFLOAD_THRESHOLD // 2


def answers_directly(function: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a coroutine function that takes ``dask_worker`` and answers data msgpack carries as it
    is (bytes) to be served by each worker under an op of its own once it ran there through dask's
    ``run`` handler: later calls skip what ``run`` does around every call (unpickle the function,
    read its signature twice, wrap the answer for pickling; ~60 µs a call on each side here)."""
    op = f"gpugeek-{function.__module__}.{function.__qualname__}"

    @functools.wraps(function)
    async def through_run(*args: Any, dask_worker: Any = None) -> Any:
        if dask_worker is not None and op not in dask_worker.handlers:
            dask_worker.handlers[op] = _direct_handler(function, dask_worker)
        return await function(*args, dask_worker=dask_worker)

    through_run.direct_op = op  # type: ignore[attr-defined]
    return through_run


def _direct_handler(function: Callable[..., Any], dask_worker: Any) -> Callable[..., Any]:
    from distributed.core import error_message

    async def direct(args: list[Any]) -> Any:
        """On the worker: one call of a function served directly; an error travels as ``run``'s do."""
        try:
            return await function(*args, dask_worker=dask_worker)
        except Exception as e:
            return error_message(e)

    direct.__name__ = function.__name__  # dask's handler log line names it
    return direct


def _name(function: Callable[..., Any]) -> str:
    return str(getattr(function, "__name__", function))


class PoolTransport:
    """Calls to the workers of one pool's ``client``; safe to use from any thread but the client's loop."""

    def __init__(self, client: Any, pool_name: str) -> None:
        self.client = client
        self.pool_name = pool_name
        self._unreachable: set[str] = set()  # workers this process cannot connect to directly
        self._reached: set[str] = set()  # workers it has connected to
        self._served: set[tuple[str, str]] = set()  # (worker, op): the worker serves that function itself
        self._followed: set[str] = set()  # workers whose removal we hear of
        self._tasks: set[asyncio.Future[Any]] = set()  # running calls (asyncio keeps only weak references)
        self._restarts = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gpugeek-restart")
        self._exits_reported = False
        self._memory_limits: dict[str, int] = {}  # worker -> bytes (dask's memory_limit)

    @property
    def usable(self) -> bool:
        return bool(self.client.status == "running")

    def _loop(self) -> asyncio.AbstractEventLoop:
        """The event loop of the pool's client, where its comms live."""
        return self.client.loop.asyncio_loop  # type: ignore[no-any-return]

    # -- calls ---------------------------------------------------------------------------------
    def launch(self, events: Events, addresses: list[str], function: Callable[..., Any], *args: Any) -> None:
        """Run ``function(*args)`` on each worker; each answer (or the error that replaced it when
        the worker died) arrives on ``events`` as a :class:`~.events.RankAnswered`."""

        from distributed.protocol.pickle import dumps

        # once for every rank (they start closer together); the function is the same every job
        pickled = (_pickled_function(function), dumps(args), _NO_KWARGS)
        small = _small(pickled)

        async def launch_all() -> None:  # one wake-up of the event loop for all ranks
            for address in addresses:
                task = asyncio.ensure_future(self._call(address, function, *args, pickled=pickled, small=small))
                task.add_done_callback(functools.partial(_post_answer, events, address))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            await asyncio.sleep(0)  # each call runs up to its first wait: a reachable worker's request is sent

        # the caller waits until the requests are out: its next Python work (the attempt's watch)
        # would otherwise take turns on the GIL with the loop's sending, and the ranks would start
        # later and further apart (a barrier waits for the last). Bounded: a stuck loop is the
        # watch's to report, not this call's, and so is a loop that closed under it (a stopping pool)
        sent = asyncio.run_coroutine_threadsafe(launch_all(), self._loop())
        with contextlib.suppress(concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
            sent.result(timeout=LAUNCH_SENT_S)

    async def _call(
        self,
        address: str,
        function: Callable[..., Any],
        *args: Any,
        pickled: tuple[bytes, bytes, bytes],
        small: bool,
    ) -> Any:
        from distributed.core import clean_exception, send_recv

        if address not in self._unreachable:
            try:
                connecting = self.client.rpc.connect(address)
                # a worker reached before answers at once (pooled connection); a new one gets a deadline
                comm = await (
                    connecting if address in self._reached else asyncio.wait_for(connecting, DIRECT_CONNECT_S)
                )
            except (TimeoutError, OSError) as e:
                if address in self._reached:  # it was reachable: it went away before the job reached it
                    raise WorkerGone(f"worker {address} is gone ({e})") from e
                log.info(
                    "pool %s: worker %s not reachable directly (%s); going through the scheduler",
                    self.pool_name,
                    address,
                    e,
                )
                self._unreachable.add(address)
            else:
                self._reached.add(address)
                op = getattr(function, "direct_op", None)
                served = op is not None and (address, op) in self._served
                # a small request is packed where it is sent (dask would first walk the message with
                # sizeof to decide whether to pack it on another thread), and its answer, bytes,
                # unpacked there too. The comm is pooled: its setting is put back before reuse
                offload = comm.allow_offload
                comm.allow_offload = not small
                try:
                    if served:
                        response = await send_recv(comm, op=op, args=list(args))
                    else:
                        function_blob, args_blob, kwargs_blob = pickled
                        response = await send_recv(
                            comm, op="run", function=function_blob, args=args_blob, kwargs=kwargs_blob, wait=True
                        )
                finally:
                    comm.allow_offload = offload
                    self.client.rpc.reuse(address, comm)
                if served:
                    if response is None:  # no such op: a new worker process at the same address
                        self._served.discard((address, op))
                        return await self._call(address, function, *args, pickled=pickled, small=small)
                    if not isinstance(response, dict):  # a dict is the error dask made of an exception
                        return response
                elif response["status"] == "OK":
                    if op is not None:
                        self._served.add((address, op))
                    return response["result"]
                _, error, tb = clean_exception(**response)
                raise (error or RuntimeError(str(response))).with_traceback(tb)
        answers = await self.client.run(function, *args, workers=[address], on_error="raise", asynchronous=True)
        return answers[address]

    def fire(self, function: Callable[..., Any], addresses: list[str], *args: Any) -> None:
        """Run ``function`` on workers without waiting for the answers."""
        if addresses:
            coroutine = self.client.run(function, *args, workers=addresses, on_error="ignore", asynchronous=True)
            asyncio.run_coroutine_threadsafe(coroutine, self._loop())

    def ask(
        self, function: Callable[..., Any], addresses: list[str], *args: Any, timeout: float = 3.0
    ) -> dict[str, Any]:
        """Run ``function`` on workers and wait (at most ``timeout`` s) for their answers.

        Each worker is asked on its own, so one that cannot answer (frozen, gone) is only missing
        from the answers instead of hiding the others'.
        """

        async def ask_each() -> dict[str, Any]:
            calls = {
                a: asyncio.ensure_future(
                    self.client.run(function, *args, workers=[a], on_error="return", asynchronous=True)
                )
                for a in addresses
            }
            done, pending = await asyncio.wait(calls.values(), timeout=timeout)
            for call in pending:
                call.cancel()
            answers: dict[str, Any] = {}
            for call in done:
                if call.exception() is None:
                    answers.update(call.result())
            return answers

        if not addresses:
            return {}
        future = asyncio.run_coroutine_threadsafe(ask_each(), self._loop())
        try:
            answers = future.result(timeout=timeout + 5.0)
        except Exception as e:
            log.info("workers did not answer %s: %s", _name(function), e)
            return {}
        if len(answers) < len(addresses):
            log.info(
                "workers %s did not answer %s within %.0f s",
                sorted(set(addresses) - set(answers)),
                _name(function),
                timeout,
            )
        return answers

    # -- the workers ---------------------------------------------------------------------------
    def live_workers(self) -> dict[str, dict[str, Any]]:
        """The scheduler's workers now: address -> its entry in the scheduler's identity."""
        workers = connected_workers(self.client)
        self.remember_memory_limits(workers)
        return workers

    def restart_workers(self, addresses: list[str], timeout: float) -> concurrent.futures.Future[None]:
        """Have the nannies restart these workers (ending them outright if they do not stop in
        ``timeout``); the future fails when they could not be restarted (e.g. workers without a nanny)."""

        def restart() -> None:
            self.client.restart_workers(workers=addresses, timeout=timeout, raise_for_error=False)

        return self._restarts.submit(restart)

    def upload_package(self, archive: str) -> None:
        """Put a zip on every worker's ``sys.path``, also on workers that join later."""
        self.client.upload_file(archive)

    # -- how workers ended ---------------------------------------------------------------------
    def report_exits(self) -> None:
        """Have every nanny report how its worker processes end (once per pool and process)."""
        if self._exits_reported:
            return
        self._exits_reported = True
        try:
            self.client.register_plugin(exit_reporter(), name=EXIT_PLUGIN)
        except Exception as e:  # workers without a nanny, or a nanny of another dask: no exit statuses
            exit_reporter_setup_failed(e)

    def death_of(self, address: str, since: float, wait: float = 2.0) -> dict[str, Any]:
        """What the nanny said of worker ``address``'s end after ``since`` (a time.time()): its
        ``exitcode`` and, for dask's memory kill, ``rss`` and the worker's ``memory_limit``; waits up
        to ``wait`` s for the exit status (the nanny sends it as the process ends). {} if nothing."""
        facts: dict[str, Any] = {}

        def exit_status_known() -> bool:
            for topic in (MEMORY_KILL_TOPIC, EXIT_TOPIC):
                for stamp, message in self.client.get_events(topic) or ():
                    if stamp >= since and isinstance(message, dict) and message.get("worker") == address:
                        facts.update(message)
            return "exitcode" in facts or not self._exits_reported

        wait_for(exit_status_known, timeout=wait, interval=0.05)
        if not facts.get("memory_limit"):
            facts["memory_limit"] = self._memory_limits.get(address)
        return facts

    def remember_memory_limits(self, workers: dict[str, dict[str, Any]]) -> None:
        """Keep each worker's memory limit, which a killed worker no longer tells."""
        for address, info in workers.items():
            if info.get("memory_limit"):
                self._memory_limits[address] = int(info["memory_limit"])

    # -- events --------------------------------------------------------------------------------
    def subscribe(self, topic: str, handler: EventHandler) -> None:
        """Deliver the messages of ``topic`` to ``handler``; returns once a probe sent after the
        subscription came back, so that no event logged from now on is missed."""
        probe = f"probe-{secrets.token_hex(4)}"
        arrived = threading.Event()

        def receive(event: tuple[float, Any]) -> None:
            _, message = event
            if isinstance(message, dict):
                if message.get("probe") == probe:
                    arrived.set()
                else:
                    handler(message)

        self.client.subscribe_topic(topic, receive)

        def probe_came_back() -> bool:
            self.client.log_event(topic, {"probe": probe})
            return arrived.wait(0.05)

        if not wait_for(probe_came_back, timeout=SUBSCRIBE_CONFIRM_S, interval=0):
            log.info("pool %s: the subscription to %s was not confirmed", self.pool_name, topic)

    def follow_removals(self, addresses: list[str], on_removed: Callable[[str], None]) -> None:
        """Call ``on_removed(address)`` the moment the scheduler removes one of these workers (its own
        event topic); workers no longer listed are no longer followed, nor remembered as serving a
        function directly."""

        def receive(address: str, event: tuple[float, Any]) -> None:
            _, message = event
            if isinstance(message, dict) and message.get("action") == "remove-worker":
                on_removed(address)

        for address in self._followed - set(addresses):
            self.client.unsubscribe_topic(address)
        for address in set(addresses) - self._followed:
            self.client.subscribe_topic(address, functools.partial(receive, address))
        self._followed = set(addresses)
        self._served = {(address, op) for address, op in self._served if address in self._followed}


# -- how a worker process ended --------------------------------------------------------------------
# a nanny's worker process ended: {"worker", "exitcode", "memory_limit", "terminate"} (the nanny's own)
EXIT_TOPIC = "gpugeek-worker-exit"
MEMORY_KILL_TOPIC = "worker-restart-memory"  # dask's own: the nanny ended it for memory {"worker", "pid", "rss"}
EXIT_PLUGIN = "gpugeek-exit-codes"


def exit_reporter() -> Any:
    """A dask ``NannyPlugin`` that reports the exit status of each worker process its nanny sees end
    (torchrun's ``exitcode``), as an event on :data:`EXIT_TOPIC`; made here, where dask is imported."""
    from distributed.core import Status
    from distributed.diagnostics.plugin import NannyPlugin

    class ExitReporter(NannyPlugin):
        name = EXIT_PLUGIN

        def setup(self, nanny: Any) -> None:
            # The nanny hands its bound _on_worker_exit_sync to each WorkerProcess it starts: wrap the
            # one the running process holds and the one the next processes will get.
            original = nanny._on_worker_exit_sync

            def on_exit(exitcode: int) -> None:
                try:
                    if nanny.status == Status.running:  # not when the pool stops: no one to tell then
                        memory = getattr(nanny, "memory_manager", None)
                        nanny.log_event(
                            EXIT_TOPIC,
                            {
                                "worker": nanny.worker_address,
                                "exitcode": exitcode,
                                "memory_limit": getattr(memory, "memory_limit", None),
                                "terminate": getattr(memory, "memory_terminate_fraction", None),
                            },
                        )
                finally:
                    original(exitcode)

            nanny._on_worker_exit_sync = on_exit
            if nanny.process is not None:
                nanny.process.on_exit = on_exit

    return ExitReporter()


def exit_reporter_setup_failed(error: BaseException) -> None:
    log.info("worker exit statuses will not be reported: %s", error)


def ask_scheduler_workers(
    address: str,
    pool_name: str,
    function: Callable[..., Any],
    *args: Any,
    timeout: float = 3.0,
    connect_timeout: float = DIRECT_CONNECT_S,
    security: Any = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """From any process (a second kernel, the server): the workers of the scheduler at ``address``
    and the answers of ``function(*args)`` from those that answered within ``timeout`` s, each asked
    on its own (:meth:`PoolTransport.ask`), over a short-lived client closed before returning.
    ``security``: the pool's dask ``Security`` (its TLS certificates); None: dask's configuration.

    Raises ``OSError`` or ``TimeoutError`` when the scheduler cannot be reached in ``connect_timeout``.
    """
    from distributed import Client

    client = Client(address, set_as_default=False, timeout=connect_timeout, security=security)
    try:
        transport = PoolTransport(client, pool_name)
        workers = transport.live_workers()
        return workers, transport.ask(function, sorted(workers), *args, timeout=timeout)
    finally:
        try:
            client.close(timeout=connect_timeout)
        except Exception as e:  # the answers are in; only this client's clean-up is lost
            log.info("pool %s: the client asking %s did not close cleanly: %s", pool_name, _name(function), e)


def tell_scheduler(
    address: str,
    pool_name: str,
    topic: str,
    message: dict[str, Any],
    connect_timeout: float = DIRECT_CONNECT_S,
    security: Any = None,
) -> None:
    """From any process: log ``message`` on ``topic`` at the scheduler at ``address`` (its
    subscribers, whichever process holds them, receive it), over a short-lived client.

    Raises ``OSError`` or ``TimeoutError`` when the scheduler cannot be reached in ``connect_timeout``.
    """
    from distributed import Client

    client = Client(address, set_as_default=False, timeout=connect_timeout, security=security)
    try:
        client.log_event(topic, message)
    finally:
        try:
            client.close(timeout=connect_timeout)
        except Exception as e:  # the message is at the scheduler; only this client's clean-up is lost
            log.info("pool %s: the client telling %s did not close cleanly: %s", pool_name, topic, e)


def own_client(scheduler_address: str, security: Any) -> Any:
    """A dask client of its own to a pool's scheduler (its topic subscriptions are its own: dask has
    one handler per topic and client), for following a job apart from the pool's job agent."""
    from distributed import Client

    return Client(scheduler_address, security=security, set_as_default=False, timeout=30)
