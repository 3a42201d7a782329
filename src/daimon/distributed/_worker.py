"""Worker: runs an agent on the tasks a broker leases to it, losing none."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from daimon._run_logs import (
    AGENT_KEY,
    DEADLINE_KEY,
    GRACE_KEY,
    LISTENER_KIND,
    LOG_KIND,
    RETENTION_KEY,
    STREAM_KEY,
    TIMEOUT_KEY,
    LogJob,
    LogWriter,
    log_job,
    lost_run,
    runs_again,
    task_agent,
    unmade_job_frames,
    watch_cancels,
)
from daimon.core.cancel import CancelToken
from daimon.core.errors import (
    AgentRunError,
    ApprovalRequiredError,
    BudgetExceededError,
    BuilderError,
    DaimonError,
    GuardrailBlockedError,
    MaxIterationsError,
    ModelError,
    OutputValidationError,
    RepeatedToolCallError,
    RunCancelled,
    RunLeasedError,
    SerializationError,
)
from daimon.core.errors import TimeoutError as RunTimeoutError
from daimon.core.protocols import Broker, Delivery, Promptable, Resumable
from daimon.core.results import AgentResponse
from daimon.core.state_store import StateStore
from daimon.core.tasks import AgentTask, TaskPause, TaskResult, TaskState
from daimon.distributed._trace import _CURRENT, TRACEPARENT, child_traceparent
from daimon.distributed._urls import broker_from_url
from daimon.kit.lifecycle import Once

__all__ = ("Worker", "default_should_retry", "run_worker")

_log = logging.getLogger("daimon.distributed")

_CANNOT_RESUME = "a worker whose agent has no resume()"

_STOP_WAIT = 5.0
"""Seconds a cancelled run gets to stop before its task is cancelled outright."""

_MAX_SETTLE_PAUSE = 1.0
"""Seconds between two tries to settle a task, at most (the pause doubles from 50 ms)."""

_RETENTION = 600.0
"""Seconds a run log is kept after its last frame, when the task does not say."""
_MOST_FRAMES = 1_000_000
"""The most frames a later attempt reads back from its log."""

_PERMANENT = (
    ApprovalRequiredError,  # the same prompt pauses again where nobody can approve
    BuilderError,
    SerializationError,
    GuardrailBlockedError,
    BudgetExceededError,
    MaxIterationsError,
    RepeatedToolCallError,
    OutputValidationError,
)


def default_should_retry(error: BaseException) -> bool:
    """Whether another attempt may succeed where this one raised ``error``.

    Provider errors retry when the provider said so (``ModelError.retryable``); configuration
    mistakes, guardrail blocks, spent budgets, iteration limits, tripped loop guards and invalid
    output do not (they would fail the same way, at a price); anything else (a lost connection, a
    bug in a tool that depends on outside state) does.
    """
    if isinstance(error, ModelError):
        return error.retryable
    return not isinstance(error, _PERMANENT)


def _call_timeout(lease: float) -> float:
    """Seconds a heartbeat or a try to settle may take before the worker gives it up.

    A fifth of the lease, between 1 s and 5 s: several tries fit in a lease, so a call lost in a
    network cut (sent into a connection that no longer carries anything) cannot eat the lease.
    """
    return min(max(lease / 5.0, 1.0), 5.0)


def _lease_left(error: RunLeasedError) -> float:
    """Seconds until the run lease that refused this attempt ends, and a little more."""
    return max(error.expires_at / 1000.0 - time.time(), 0.0) + 0.25


def _backoff(attempt: int) -> float:
    """1 s, 2 s, 4 s, ... up to a minute, with jitter."""
    return min(60.0, 2.0 ** (attempt - 1)) * random.uniform(0.5, 1.0)


class Worker:
    """Runs ``agent`` on tasks from ``broker``, up to ``concurrency`` at a time.

    ``agent`` is any :class:`~daimon.core.protocols.Promptable`: an Agent, a Supervisor, a
    HandoffNetwork, a flow. Only a :class:`~daimon.core.protocols.Resumable` one (an Agent, a
    Supervisor) can pause for approvals; for the others a pause fails the task (for good) with
    :class:`~daimon.core.errors.ApprovalRequiredError`, the one rule of callers that cannot ask.

    Delivery is at least once: a task whose worker dies is leased again after the broker's
    ``lease`` and runs again as a new attempt (with a checkpoint on the agent, it resumes where
    the lost attempt stopped: the task's ``run_id``, or else its task id, is the run id). Only
    the newest attempt's result is recorded, so each task has exactly one visible result. Only
    a ``Resumable`` promptable's run starts again: a HandoffNetwork or a flow prompts its agents
    with fresh run ids, so its tools would run again; its failed attempt fails the task for
    good, and a later attempt (its worker lost, or the task handed back) fails with ``RunLost``
    without running.

    While a task runs its lease is renewed every ``lease / 3`` seconds; a heartbeat that finds
    the task cancelled, or taken over by a newer attempt, cancels the run. Recording the result
    (or a failure, a pause, a hand-back) is retried while the broker cannot be reached, the
    heartbeats going on, until the lease runs out: a network cut shorter than the lease does
    not run the task twice. Each heartbeat and each try to settle is bounded (a fifth of the
    lease, between 1 s and 5 s), so a call lost in a cut is given up and tried again. An
    exception from the run fails the attempt: ``should_retry`` decides whether the task gets
    another one (after ``retry_delay``), up to the broker's ``max_deliver``; then it is
    dead-lettered.

    A run that pauses for approval is recorded as paused, its state kept by the broker (the
    task's status lists the approvals); decisions sent with ``broker.decide`` queue it again,
    and the worker that takes it resumes the run (``Agent.resume``) instead of prompting.

    :meth:`stop` (SIGTERM under :func:`run_worker`) stops taking tasks, gives those in flight
    ``grace`` seconds to finish, then cancels them and hands them back to the broker.

    A task whose metadata names a run log (``daimon serve --broker`` submits such tasks) is run
    streamed, each event appended to the log in ``store`` as the server's own stream frames it,
    for clients reading it through any replica: an attempt after the first starts with an
    ``attempt`` frame (the lost attempt's last deltas may come again), and the log ends once
    the task does (after the ``done`` event, or an ``error`` one when it failed for good or was
    cancelled). Its run is cancelled once no client has read the log for the task's grace, or
    once the request's timeout is spent (a later attempt gets what is left of it).

    Args:
        agent: The agent (any promptable) that runs every task, or agents by name: each task
            runs the one its metadata names (``daimon serve --broker`` names the served agent;
            a task naming none runs the first), and a task naming another fails for good.
        broker: Where tasks come from.
        concurrency: How many tasks run at once.
        grace: Seconds in-flight tasks get to finish after :meth:`stop`.
        heartbeats: Renew leases while tasks run (turn off only to test lease expiry).
        should_retry: Whether a task whose run raised this error gets another attempt.
        retry_delay: Seconds before a failed task's next attempt, fixed or by attempt number.
        poll: Seconds one wait for a task lasts (how soon :meth:`stop` is noticed when idle).
        store: The state store the server's run logs are in (``daimon serve --store``); a task
            that names a log fails without one.
    """

    def __init__(
        self,
        agent: Promptable | Mapping[str, Promptable],
        broker: Broker,
        *,
        concurrency: int = 4,
        grace: float = 30.0,
        heartbeats: bool = True,
        should_retry: Callable[[BaseException], bool] = default_should_retry,
        retry_delay: float | Callable[[int], float] = _backoff,
        poll: float = 1.0,
        store: StateStore | None = None,
    ) -> None:
        if type(concurrency) is not int or concurrency < 1:
            raise BuilderError(f"concurrency must be a positive integer, got {concurrency!r}")
        if grace < 0:
            raise BuilderError(f"grace must not be negative, got {grace!r}")
        self.agents: dict[str, Promptable] = {}
        """The agents by name, when the worker was given a mapping of them (else empty)."""
        if isinstance(agent, Mapping):
            self.agents = dict(agent)
            if not self.agents:
                raise BuilderError("a worker needs at least one agent")
            agent = next(iter(self.agents.values()))
        self.agent: Promptable = agent
        """The agent of tasks that name none (the first, given several)."""
        self.broker = broker
        self.concurrency = concurrency
        self.grace = grace
        self.heartbeats = heartbeats
        self.should_retry = should_retry
        self.retry_delay = retry_delay
        self.poll = poll
        self.store = store
        self._store_set_up = Once()
        self._logged: dict[str, _Run] = {}
        """The runs writing to a log, by its name (for cancels sent through the store)."""
        self._cancels: asyncio.Task[None] | None = None
        self.completed = 0
        """Tasks whose result this worker recorded."""
        self.paused = 0
        """Runs this worker recorded as paused for approval."""
        self.failed = 0
        """Attempts that failed here (retried or dead-lettered)."""
        self.released = 0
        """Tasks handed back at shutdown."""
        self.refused = 0
        """Results the broker refused: the task had been cancelled, or taken over by a newer
        attempt after this one lost its lease."""
        self._call_timeout = _call_timeout(broker.lease)
        self._stopping = asyncio.Event()
        self._in_flight: dict[asyncio.Task[None], _Run] = {}

    def __repr__(self) -> str:
        return f"Worker(agent={self.agent!r}, concurrency={self.concurrency})"

    @property
    def in_flight(self) -> int:
        """How many tasks are running now."""
        return len(self._in_flight)

    def stop(self) -> None:
        """Stop taking tasks and wind down (safe from a signal handler); :meth:`run` returns."""
        self._stopping.set()

    async def run(self) -> None:
        """Take and run tasks until :meth:`stop`; returns once every task has been settled."""
        try:
            await self._take_tasks()
        except asyncio.CancelledError:  # cancelled from outside: no grace, hand everything back
            self.grace = 0.0
            await asyncio.shield(self._wind_down())
            await self._stop_watching()
            raise
        await self._wind_down()
        await self._stop_watching()

    async def _stop_watching(self) -> None:
        if self._cancels is not None:
            self._cancels.cancel()
            await asyncio.wait({self._cancels}, timeout=_STOP_WAIT)

    async def _take_tasks(self) -> None:
        slots = asyncio.Semaphore(self.concurrency)
        failures = 0
        while not self._stopping.is_set():
            await slots.acquire()
            if self._stopping.is_set():
                slots.release()
                break
            try:
                delivery = await self.broker.claim(wait=self.poll)
            except Exception:
                slots.release()
                failures += 1
                _log.exception("claiming a task failed (try %d); retrying", failures)
                await self._sleep(min(5.0, 0.1 * 2**failures))
                continue
            failures = 0
            if delivery is None:
                slots.release()
                continue
            run = _Run(delivery, time.monotonic() + self.broker.lease)
            if self._stopping.is_set():  # claimed while stopping: give it straight back
                await self._settle(run, "release", delivery.release)
                slots.release()
                break
            task = asyncio.create_task(self._execute(run))
            self._in_flight[task] = run

            def done(finished: asyncio.Task[None], slots: asyncio.Semaphore = slots) -> None:
                self._in_flight.pop(finished, None)
                slots.release()
                if not finished.cancelled() and (error := finished.exception()) is not None:
                    _log.error("running a task failed", exc_info=error)

            task.add_done_callback(done)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _wind_down(self) -> None:
        tasks = set(self._in_flight)
        if not tasks:
            return
        _log.info("stopping: %d task(s) in flight, %.3gs to finish", len(tasks), self.grace)
        _, late = await asyncio.wait(tasks, timeout=self.grace)
        runs = {task: self._in_flight[task] for task in late if task in self._in_flight}
        for run in runs.values():
            run.stop("shutdown", "the worker is shutting down")
        if not late:
            return
        _, stuck = await asyncio.wait(late, timeout=_STOP_WAIT)
        for task in stuck:  # a run that ignores its cancel token: end it the hard way
            task.cancel()
            if (hung := runs.get(task)) is not None:
                hung.finished = True  # stops its heartbeats
                _log.warning(
                    "task %s ignored cancellation; handing it back", hung.delivery.task.task_id
                )
                await self._settle(hung, "release", hung.delivery.release)
                self.released += 1
        if stuck:
            await asyncio.wait(stuck, timeout=_STOP_WAIT)

    async def _execute(self, run: _Run) -> None:
        task = run.delivery.task
        beat = asyncio.create_task(self._heartbeat(run)) if self.heartbeats else None
        token = _CURRENT.set(child_traceparent(task.metadata.get(TRACEPARENT)))
        readers: asyncio.Task[None] | None = None
        deadline: asyncio.TimerHandle | None = None
        try:  # the lease is renewed until the attempt is settled, as settling may take a while
            run.log = await self._open_log(task)
            if run.log is not None:
                run.job = log_job(self._agent_for(task), task, run.log.store)
                self._logged[run.log.stream] = run
            readers = self._watch_readers(run, task)
            deadline = self._deadline(run, task)
            response = await self._run_agent(task, run)
        except RunCancelled as exc:
            if run.reason == "shutdown":
                await self._settle(run, "release", run.delivery.release)
                self.released += 1
            elif run.reason is None:  # cancelled from inside the run: treat as a failure
                await self._failed(run, exc)
            else:  # cancelled by a client, or the log's rules, or another attempt took over
                ending = run.ending or exc
                if run.ending is not None or await self._cancelled(run):
                    await self._end_log(run, ending)
                await self._settle(run, "settle", run.delivery.fail, str(ending))
        except Exception as exc:
            await self._failed(run, exc)
        else:  # the log ends first: a reader that finds the task settled finds its log ended
            await self._end_log(run)
            await self._record(run, response)
        finally:
            if run.log is not None and self._logged.get(run.log.stream) is run:
                del self._logged[run.log.stream]
            if readers is not None:
                readers.cancel()
            if deadline is not None:
                deadline.cancel()
            await self._stop_beating(run, beat)
            _CURRENT.reset(token)

    def _agent_for(self, task: AgentTask) -> Promptable:
        """The agent the task names (``daimon serve`` names one), or this worker's only one.

        Raises:
            BuilderError: The worker runs several agents, none of them the one named.
        """
        name = task.metadata.get(AGENT_KEY)
        if not self.agents or name is None:
            return self.agent
        if isinstance(name, str) and name in self.agents:
            return self.agents[name]
        raise BuilderError(
            f"task {task.task_id} is for agent {name!r}; this worker runs {sorted(self.agents)}: "
            "every worker on a queue needs every agent its servers submit runs of"
        )

    def _cancel(self, stream: str) -> None:
        """Stop the run writing ``stream`` here, if any: a client cancelled it."""
        run = self._logged.get(stream)
        if run is not None:
            run.stop("cancelled", "cancelled by the client")

    async def _open_log(self, task: AgentTask) -> LogWriter | None:
        """The writer of the run log the task names; ``None`` when it names none.

        Raises:
            BuilderError: The task names a log but this worker has no store, or the name is
                not a string.
        """
        stream = task.metadata.get(STREAM_KEY)
        if stream is None:
            return None
        if not isinstance(stream, str) or not stream:
            raise BuilderError(f"task metadata {STREAM_KEY!r} must name a log, got {stream!r}")
        if self.store is None:
            raise BuilderError(
                f"task {task.task_id} streams its events to a server's run log, but this worker "
                "has no state store: start it with --store URL (the store of `daimon serve "
                "--store`), or give Worker(store=...)"
            )
        await self._store_set_up.run(self._open_store)
        retention = _seconds(task.metadata.get(RETENTION_KEY)) or _RETENTION
        return LogWriter(
            self.store,
            stream,
            retention=retention,
            attempt=task.attempt,
            patience=self.broker.lease,  # past its lease, another attempt has the run
        )

    async def _open_store(self) -> None:
        """Set the store up, and start following the runs clients cancel."""
        assert self.store is not None
        await self.store.setup()
        self._cancels = asyncio.create_task(watch_cancels(self.store, self._cancel))

    def _watch_readers(self, run: _Run, task: AgentTask) -> asyncio.Task[None] | None:
        """Cancel the run once no client has read its log for the task's grace (if it has one)."""
        grace = _seconds(task.metadata.get(GRACE_KEY))
        if run.log is None or grace is None:
            return None
        return asyncio.create_task(self._readers(run, run.log, grace))

    @staticmethod
    def _deadline(run: _Run, task: AgentTask) -> asyncio.TimerHandle | None:
        """Cancel a run that streams to a log once the task's timeout (if any) has passed.

        The timeout counts from the task's submission (its deadline): an attempt after a lost
        one gets what is left of it.
        """
        timeout = _seconds(task.metadata.get(TIMEOUT_KEY))
        if run.log is None or timeout is None:
            return None
        left = timeout
        deadline = _seconds(task.metadata.get(DEADLINE_KEY))
        if deadline is not None:
            left = min(timeout, deadline - time.time())
        ending = RunTimeoutError(timeout, "the run")
        return asyncio.get_running_loop().call_later(max(left, 0.0), run.end, ending)

    @staticmethod
    async def _readers(run: _Run, log: LogWriter, grace: float) -> None:
        # Readers refresh the listener record (it lives `grace` seconds) while they read.
        while True:
            await asyncio.sleep(grace / 2)
            try:
                listened = await log.store.get(LISTENER_KIND, log.stream)
            except Exception:
                continue  # the store is down: keep the run rather than guess
            if listened is None:
                run.end(RunCancelled(f"no client read its events for {grace:g} s"))
                return

    async def _end_log(self, run: _Run, ending: BaseException | None = None) -> None:
        """End the run's log, if it has one (after the frame saying why the run ``ending``ed).

        The run's job records the early end first (a Responses run keeps its response failed or
        cancelled). A store that fails is logged.
        """
        if run.log is None:
            return
        frames: list[bytes] = []
        try:
            async with asyncio.timeout(self._call_timeout):
                if ending is not None and run.job is not None:
                    await run.job.end(ending, run.cancel.reason if run.cancel.cancelled else None)
                    frames = [run.job.on_error(ending)]
                elif ending is not None:  # the job could not be made
                    frames = unmade_job_frames(run.delivery.task, ending)
                for frame in frames[:-1]:
                    await run.log.append(frame)
                await run.log.end(frames[-1] if frames else None)
        except Exception:
            _log.warning("could not end the run log of task %s", run.delivery.task.task_id)

    async def _cancelled(self, run: _Run) -> bool:
        """Whether a client cancelled the task (rather than a newer attempt taking it over)."""
        if run.log is None:
            return False
        try:
            async with asyncio.timeout(self._call_timeout):
                status = await self.broker.status(run.delivery.task.task_id)
        except Exception:
            return False
        return status.state is TaskState.CANCELLED

    async def _run_agent(self, task: AgentTask, run: _Run) -> AgentResponse:
        """Run the task's prompt, or resume its paused run with the decisions it carries.

        A prompt whose task names a run log is run streamed, its events written there.
        """
        agent = self._agent_for(task)
        cancel = run.cancel
        if task.resume is None and run.log is not None and run.job is not None:
            response = await self._stream(task, run.log, run.job, cancel)
            if isinstance(agent, Resumable) or run.job.keeps_pauses:
                return response
            return response.require_finished(_CANNOT_RESUME)
        if task.resume is None:
            if task.attempt > 1 and not runs_again(agent):
                raise lost_run(task_agent(task, agent))
            response = await agent.prompt(
                task.input,
                run_id=task.run_id or task.task_id,
                session_id=task.session_id,
                cancel=cancel,
            )
            if isinstance(agent, Resumable):
                return response
            return response.require_finished(_CANNOT_RESUME)
        if not isinstance(agent, Resumable):
            raise BuilderError(f"a task to resume needs an agent that can resume: {_CANNOT_RESUME}")
        state = task.resume.state
        paused = AgentResponse(text="", run_id=state.run_id, state=state)
        return await agent.resume(paused, task.resume.decisions, cancel=cancel)

    @staticmethod
    async def _stream(
        task: AgentTask, log: LogWriter, job: LogJob, cancel: CancelToken
    ) -> AgentResponse:
        """Run the task's job, appending each frame to ``log``; the response.

        A later attempt goes on from the frames the lost ones logged.
        """
        if task.attempt > 1:
            logged = await log.store.read_after(LOG_KIND, log.stream, 0, limit=_MOST_FRAMES)
            job.resume([value for _, value in logged])
        frames = job.frames(cancel)
        try:
            async for frame in frames:
                await log.append(frame)
                cancel.raise_if_cancelled()  # a model's long stream stops at its next event
        finally:
            await frames.aclose()
        if job.response is None:
            raise AgentRunError("the run's job ended without a response")
        return job.response

    async def _record(self, run: _Run, response: AgentResponse) -> None:
        """Record the run's result, or its pause when it waits for approvals."""
        delivery = run.delivery
        kept_by_job = run.job is not None and run.job.keeps_pauses
        if response.paused and response.state is not None and not kept_by_job:
            pause = TaskPause(
                task=delivery.task, approvals=response.pending_approvals, state=response.state
            )
            recorded = await self._settle(run, "pause", delivery.pause, pause)
            self.paused += recorded
        else:
            result = TaskResult(
                task_id=delivery.task.task_id,
                output=response.text,
                iterations=response.iterations,
                cost=response.cost,
                usage=response.usage,
            )
            recorded = await self._settle(run, "complete", delivery.complete, result)
            self.completed += recorded
        self.refused += not recorded

    async def _failed(self, run: _Run, exc: BaseException) -> None:
        task = run.delivery.task
        retry = self.should_retry(exc) and self._may_run_again(run)
        delay = self.retry_delay(task.attempt) if callable(self.retry_delay) else self.retry_delay
        if isinstance(exc, RunLeasedError):  # its run still runs elsewhere: try after that lease
            delay = max(delay, _lease_left(exc))
        error = f"{type(exc).__name__}: {exc}"
        _log.warning(
            "task %s attempt %d failed (%s): %s",
            task.task_id,
            task.attempt,
            "will retry" if retry else "final",
            error,
            exc_info=not isinstance(exc, DaimonError),
        )
        self.failed += 1
        if not retry or task.attempt >= self.broker.max_deliver:  # failed for good
            await self._end_log(run, exc)
        await self._settle(run, "fail", run.delivery.fail, error, retry=retry, delay=delay)

    def _may_run_again(self, run: _Run) -> bool:
        """Whether the task's run may start again after this attempt (see ``runs_again``)."""
        if run.job is not None:
            return run.job.retries
        try:
            return runs_again(self._agent_for(run.delivery.task))
        except BuilderError:
            return False

    async def _heartbeat(self, run: _Run) -> None:
        interval = max(self.broker.lease / 3.0, 0.01)
        while True:
            await asyncio.sleep(interval)
            if run.finished:
                return
            started = time.monotonic()
            try:
                async with asyncio.timeout(self._call_timeout):
                    alive = await run.delivery.heartbeat()
            except Exception:
                _log.warning(
                    "heartbeat for task %s failed", run.delivery.task.task_id, exc_info=True
                )
                continue
            if alive:
                run.lease_ends = started + self.broker.lease
            elif not run.finished:
                run.stop("stopped", "the task was cancelled, or a newer attempt took it over")
                return

    @staticmethod
    async def _stop_beating(run: _Run, beat: asyncio.Task[None] | None) -> None:
        # The flag is what stops the loop: a client library that swallows a cancellation
        # (asyncio.wait_for in Python 3.11 can) must not keep a settled task's lease alive.
        run.finished = True
        if beat is not None:
            beat.cancel()
            await asyncio.wait({beat}, timeout=1.0)

    async def _settle(
        self,
        run: _Run,
        what: str,
        method: Callable[..., Awaitable[Any]],
        *args: Any,
        **kwargs: Any,
    ) -> bool:
        """Call ``method`` until the broker answers, or the run's lease runs out.

        Each try is bounded by the call timeout, so several fit in a lease; the heartbeats go
        on meanwhile and move the lease's end while the broker hears them. The tries last one
        lease at most, so a broker that renews leases but refuses the settle cannot keep the
        task from running again.
        """
        give_up = time.monotonic() + self.broker.lease
        pause = 0.05
        while True:
            try:
                async with asyncio.timeout(self._call_timeout):
                    return bool(await method(*args, **kwargs))
            except Exception:
                if time.monotonic() >= min(run.lease_ends, give_up):
                    _log.exception(
                        "could not %s task %s before its lease ran out; it will run again",
                        what,
                        run.delivery.task.task_id,
                    )
                    return False
            await asyncio.sleep(pause)
            pause = min(pause * 2, _MAX_SETTLE_PAUSE)


class _Run:
    """One task running on this worker."""

    __slots__ = ("cancel", "delivery", "ending", "finished", "job", "lease_ends", "log", "reason")

    def __init__(self, delivery: Delivery, lease_ends: float) -> None:
        self.delivery = delivery
        self.lease_ends = lease_ends
        """When the lease runs out (``time.monotonic()``), as last renewed."""
        self.cancel = CancelToken()
        self.reason: str | None = None
        self.finished = False
        self.log: LogWriter | None = None
        """The run log the task's events go to, if it names one."""
        self.job: LogJob | None = None
        """What runs to write that log (the agent's events, or a front end's run)."""
        self.ending: BaseException | None = None
        """Why the log's rules (its grace, its timeout) stopped the run: the task fails for good."""

    def stop(self, reason: str, message: str) -> None:
        if self.reason is None:
            self.reason = reason
            self.cancel.cancel(message)

    def end(self, ending: BaseException) -> None:
        """Stop the run for good, its log ending with ``ending``."""
        if self.reason is None:
            self.ending = ending
            self.stop("ended", str(ending))


def _seconds(value: object) -> float | None:
    """``value`` if it is a positive, finite number (of seconds, from a task's metadata)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf:
        return float(value)
    return None


async def run_worker(
    agent: Promptable | Mapping[str, Promptable],
    broker: str | Broker,
    *,
    concurrency: int = 4,
    grace: float = 30.0,
    handle_signals: bool = True,
    heartbeats: bool = True,
    should_retry: Callable[[BaseException], bool] = default_should_retry,
    retry_delay: float | Callable[[int], float] = _backoff,
    poll: float = 1.0,
    state_store: StateStore | str | None = None,
    **options: Any,
) -> Worker:
    """Run a :class:`Worker` until SIGTERM or SIGINT (or until its task is cancelled).

    Args:
        agent: The agent (any promptable) that runs every task, or agents by name (see
            :class:`Worker`).
        broker: A broker, or a URL naming one (``redis://...``, ``nats://...``, ``amqp://...``,
            ``memory://``); a broker made from a URL is closed on return.
        concurrency: How many tasks run at once.
        grace: Seconds in-flight tasks get to finish after SIGTERM before they are handed back.
        handle_signals: Stop gracefully on SIGTERM and SIGINT (main thread only).
        heartbeats: See :class:`Worker`.
        should_retry: See :class:`Worker`.
        retry_delay: See :class:`Worker`.
        poll: See :class:`Worker`.
        state_store: The state store of the servers whose runs the tasks are (``daimon serve
            --store``): a store, or a URL (``postgresql://...``, ``redis://...``; closed on
            return). Tasks that stream to a server's run log need it.
        **options: Options for the broker made from a URL (``lease``, ``max_deliver``,
            ``queue``, ...).

    Returns:
        The stopped worker, with its counters.
    """
    store, own_store = _state_store(state_store)
    own = isinstance(broker, str)
    if isinstance(broker, str):
        if broker.partition(":")[0] in ("amqp", "amqps"):
            options.setdefault("prefetch", concurrency)
        handle: Broker = broker_from_url(broker, **options)
    elif options:
        raise BuilderError(f"broker options {sorted(options)} need a broker URL, not a broker")
    else:
        handle = broker
    worker = Worker(
        agent,
        handle,
        concurrency=concurrency,
        grace=grace,
        heartbeats=heartbeats,
        should_retry=should_retry,
        retry_delay=retry_delay,
        poll=poll,
        store=store,
    )
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    if handle_signals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, worker.stop)
                installed.append(sig)
    try:
        await worker.run()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        if own:
            await handle.aclose()
        if own_store and store is not None:
            await store.aclose()
    return worker


def _state_store(given: StateStore | str | None) -> tuple[StateStore | None, bool]:
    """The store ``run_worker`` was given, and whether it made it (from a URL)."""
    if isinstance(given, str):
        from daimon.serverstate import state_store_from_url

        return state_store_from_url(given), True
    return given, False
