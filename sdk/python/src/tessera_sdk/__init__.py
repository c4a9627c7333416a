"""Tessera job SDK: wrap a training loop's data iterator to report progress to the daemon, and
read the device-level decision the daemon made for the job (its parallelism plan and its GPU
quota).

The wrapper is Synergy's "thin iterator API": iterating it yields exactly what the wrapped
iterable yields, while it counts iterations, measures throughput, reports both to the Tessera
daemon (``POST /v1/jobs/{id}/progress``) at most every ``report_interval`` seconds, and exposes
the CPU-worker count the scheduler granted (updated from each report's answer).

Only the standard library is used; no ML framework is needed.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Tuple

__all__ = [
    "JobContext",
    "Plan",
    "ProgressAck",
    "Quota",
    "TesseraIterator",
    "ServiceInstance",
    "Throttle",
    "checkpoint_on_sigterm",
    "instance",
    "plan",
    "quota",
    "report_load",
    "report_progress",
]
__version__ = "0.1.0"

log = logging.getLogger("tessera_sdk")


def _int_env(env: Mapping[str, str], name: str, default: int) -> int:
    try:
        return int(env.get(name, default))
    except (TypeError, ValueError):
        return default


@dataclass(frozen=True)
class JobContext:
    """Where and as whom to report: read from the environment the daemon sets."""

    url: Optional[str]
    job_id: Optional[int]
    token: Optional[str]
    cpu_workers: int = 1
    start_iteration: int = 0

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> "JobContext":
        env = os.environ if env is None else env
        job_id = env.get("TESSERA_JOB_ID")
        return cls(
            url=(env.get("TESSERA_URL") or None),
            job_id=int(job_id) if job_id and job_id.isdigit() else None,
            token=env.get("TESSERA_JOB_TOKEN") or env.get("TESSERA_TOKEN") or None,
            cpu_workers=max(1, _int_env(env, "TESSERA_CPU_WORKERS", 1)),
            start_iteration=max(0, _int_env(env, "TESSERA_START_ITERATION", 0)),
        )

    @property
    def enabled(self) -> bool:
        """True when running under the daemon (there is somewhere to report to)."""
        return bool(self.url and self.job_id is not None and self.token)


@dataclass(frozen=True)
class ProgressAck:
    """The daemon's answer to a report: what the job holds now."""

    state: str
    cpu_workers: int
    gpus: int
    memory_bytes: int
    # The CPU/memory point the job runs at now, (milli-CPUs, memory bytes) over its nodes:
    # the next rate is reported as measured there (None from a daemon without points).
    point: Optional[Tuple[int, int]] = None


def _point(value: Any) -> Optional[Tuple[int, int]]:
    """A ``{"cpuMilli": .., "memoryBytes": ..}`` document as a tuple, None when malformed."""
    if not isinstance(value, dict):
        return None
    cpu, mem = value.get("cpuMilli"), value.get("memoryBytes")
    if isinstance(cpu, int) and isinstance(mem, int) and cpu >= 0 and mem >= 0:
        return (cpu, mem)
    return None


def report_progress(
    ctx: JobContext,
    iterations: int,
    samples_per_second: Optional[float] = None,
    iterations_per_second: Optional[float] = None,
    timeout: float = 5.0,
    point: Optional[Tuple[int, int]] = None,
) -> Optional[ProgressAck]:
    """Sends one progress report; returns the daemon's answer, or None (never raises).

    ``point`` names the CPU/memory point the rates were measured at (the ``point`` of the
    acknowledgement that started the interval): the daemon keeps such a rate as one point of
    the job's CPU/memory profile (Synergy's optimistic profiling), and ignores it as a point
    when the job has been retuned since.
    """
    if not ctx.enabled:
        return None
    body = {"iterations": int(iterations)}
    if samples_per_second is not None:
        body["samplesPerSecond"] = float(samples_per_second)
    if iterations_per_second is not None:
        body["iterationsPerSecond"] = float(iterations_per_second)
    if point is not None:
        body["point"] = {"cpuMilli": int(point[0]), "memoryBytes": int(point[1])}
    req = urllib.request.Request(
        f"{ctx.url.rstrip('/')}/v1/jobs/{ctx.job_id}/progress",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {ctx.token}"},
    )
    # Training must never stop because of a report: any failure (refused, truncated or
    # malformed reply, http.client errors that are not OSError) is logged and ignored.
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            data = json.loads(resp.read().decode() or "{}")
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        return ProgressAck(
            state=str(data.get("state", "")),
            cpu_workers=int(data.get("cpuWorkers", ctx.cpu_workers)),
            gpus=int(data.get("gpus", 0)),
            memory_bytes=int(data.get("memoryBytes", 0)),
            point=_point(data.get("point")),
        )
    except Exception as e:  # noqa: BLE001 - the documented contract is "never raises"
        log.debug("tessera progress report failed: %s", e)
        return None


class TesseraIterator:
    """Wraps an iterable; reports iterations and samples/s to the daemon.

    ``batch_size`` (samples per iteration) turns iterations/s into samples/s; without it,
    only iterations/s is reported. ``report_interval`` bounds how often a report is sent.
    ``on_resize`` is called with the new worker count when the scheduler changes it.
    """

    def __init__(
        self,
        iterable: Iterable[Any],
        batch_size: Optional[int] = None,
        report_interval: float = 10.0,
        context: Optional[JobContext] = None,
        on_resize: Optional[Callable[[int], None]] = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._iterable = iterable
        self._iter: Optional[Iterator[Any]] = None
        self.batch_size = batch_size
        self.report_interval = float(report_interval)
        self.context = context if context is not None else JobContext.from_env()
        self.on_resize = on_resize
        self._clock = clock
        self.iteration = self.context.start_iteration
        self._cpu_workers = self.context.cpu_workers
        self._last_time = clock()
        self._last_iteration = self.iteration
        self.last_ack: Optional[ProgressAck] = None
        self.reports_sent = 0
        # The CPU/memory point the current interval runs at (from the last answer): each
        # interval starts at a report, so it lies wholly at the point that report's answer gave.
        self._point: Optional[Tuple[int, int]] = None

    @property
    def cpu_workers(self) -> int:
        """CPU workers (data-loading processes) the scheduler granted this job."""
        return self._cpu_workers

    def __iter__(self) -> "TesseraIterator":
        self._iter = iter(self._iterable)
        return self

    def __next__(self) -> Any:
        if self._iter is None:
            self._iter = iter(self._iterable)
        try:
            item = next(self._iter)
        except StopIteration:
            self.report(force=True)
            raise
        self.iteration += 1
        self.report()
        return item

    def __len__(self) -> int:
        return len(self._iterable)  # type: ignore[arg-type]

    def report(self, force: bool = False) -> Optional[ProgressAck]:
        """Sends a report if the interval has passed (or ``force``)."""
        now = self._clock()
        elapsed = now - self._last_time
        if not force and elapsed < self.report_interval:
            return None
        done = self.iteration - self._last_iteration
        ips = done / elapsed if (elapsed > 0 and done > 0) else None
        sps = ips * self.batch_size if (ips is not None and self.batch_size) else None
        self._last_time, self._last_iteration = now, self.iteration
        ack = report_progress(self.context, self.iteration, sps, ips, point=self._point)
        if ack is None:
            self._point = None  # unknown until the daemon answers again
            return None
        self.reports_sent += 1
        self.last_ack = ack
        self._point = ack.point
        if ack.cpu_workers >= 1 and ack.cpu_workers != self._cpu_workers:
            self._cpu_workers = ack.cpu_workers
            if self.on_resize is not None:
                self.on_resize(ack.cpu_workers)
        return ack

    def close(self) -> None:
        """Sends a final report."""
        self.report(force=True)


@dataclass(frozen=True)
class Plan:
    """How the scheduler wants the job to split its work over the devices it got.

    ``data`` x ``tensor`` x ``pipeline`` devices in all. ``gpu_type`` is the catalog name of the
    GPUs (``A100-80GB``), ``attempt`` the run's attempt number, ``placement`` the daemon's
    placement document (nodes, GPU indices and what part of each).
    """

    data: int = 1
    tensor: int = 1
    pipeline: int = 1
    gpu_type: Optional[str] = None
    attempt: int = 0
    placement: tuple = ()

    @property
    def devices(self) -> int:
        return self.data * self.tensor * self.pipeline


def _read_json(path: Optional[str]) -> Optional[dict]:
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        log.debug("tessera: cannot read %s: %s", path, e)
        return None
    return data if isinstance(data, dict) else None


def _positive(value: Any, default: int) -> int:
    try:
        v = int(value)
    except (TypeError, ValueError):
        return default
    return v if v >= 1 else default


def plan(env: Optional[Mapping[str, str]] = None) -> Plan:
    """The job's parallelism plan: the JSON file named by ``TESSERA_PLAN_FILE``, else the
    ``TESSERA_PLAN_DP/TP/PP`` and ``TESSERA_GPU_TYPE`` variables, else one data-parallel
    replica. Never raises.

    The plan is fixed for a run: when the scheduler moves the job to another cell (other GPUs,
    another plan), it stops the run (SIGTERM, see :func:`checkpoint_on_sigterm`) and starts a
    new attempt whose plan file holds the new plan. Resume from the checkpoint with it.
    """
    env = os.environ if env is None else env
    doc = _read_json(env.get("TESSERA_PLAN_FILE"))
    if doc is not None:
        placement = doc.get("placement")
        return Plan(
            data=_positive(doc.get("data"), 1),
            tensor=_positive(doc.get("tensor"), 1),
            pipeline=_positive(doc.get("pipeline"), 1),
            gpu_type=(str(doc["gpuType"]) if doc.get("gpuType") else None),
            attempt=max(0, _int_env(doc, "attempt", 0)),
            placement=tuple(placement) if isinstance(placement, list) else (),
        )
    return Plan(
        data=_positive(env.get("TESSERA_PLAN_DP"), 1),
        tensor=_positive(env.get("TESSERA_PLAN_TP"), 1),
        pipeline=_positive(env.get("TESSERA_PLAN_PP"), 1),
        gpu_type=env.get("TESSERA_GPU_TYPE") or None,
        attempt=max(0, _int_env(env, "TESSERA_ATTEMPT", 0)),
    )


@dataclass(frozen=True)
class Quota:
    """The job's share of each of its GPUs (when it shares GPUs under quotas).

    ``sm_request_permille`` is guaranteed, up to ``sm_limit_permille`` when neighbours leave
    compute idle; ``memory_bytes`` of device memory is pinned per GPU. ``version`` grows by one
    at every retune.
    """

    version: int
    sm_request_permille: int
    sm_limit_permille: int
    memory_bytes: int
    gpus: tuple = ()

    @property
    def sm_limit(self) -> float:
        """The SM limit as a fraction of the GPU (0 < limit <= 1)."""
        return min(1.0, max(0.001, self.sm_limit_permille / 1000.0))

    @property
    def sm_request(self) -> float:
        """The guaranteed SM share as a fraction of the GPU."""
        return min(1.0, max(0.0, self.sm_request_permille / 1000.0))


def quota(env: Optional[Mapping[str, str]] = None) -> Optional[Quota]:
    """The job's current quota from the file named by ``TESSERA_QUOTA_FILE`` (the daemon
    rewrites it atomically when it retunes the job in place), or None without one. Never
    raises."""
    env = os.environ if env is None else env
    doc = _read_json(env.get("TESSERA_QUOTA_FILE"))
    if doc is None:
        return None
    try:
        gpus = doc.get("gpus")
        return Quota(
            version=int(doc["version"]),
            sm_request_permille=int(doc["smRequestPermille"]),
            sm_limit_permille=int(doc["smLimitPermille"]),
            memory_bytes=int(doc["memoryBytes"]),
            gpus=tuple(int(g) for g in gpus) if isinstance(gpus, list) else (),
        )
    except (KeyError, TypeError, ValueError) as e:
        log.debug("tessera: malformed quota file: %s", e)
        return None


class Throttle:
    """Keeps a job's GPU duty cycle within its current SM limit, following retunes.

    MPS applies ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` when the process starts; a retune in
    place cannot change it, so a job that wants to honour a new limit without a restart calls
    :meth:`step` after each unit of GPU work with the seconds it took: the throttle sleeps so
    that work takes at most the limit's share of the time (a job at 1000 permille never
    sleeps). It re-reads the quota file at most every ``refresh_interval`` seconds.
    """

    def __init__(
        self,
        env: Optional[Mapping[str, str]] = None,
        refresh_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._env = env
        self.refresh_interval = float(refresh_interval)
        self._clock = clock
        self._sleep = sleep
        self._read_at: Optional[float] = None
        self.quota: Optional[Quota] = None
        self.slept = 0.0

    def current(self) -> Optional[Quota]:
        """The quota, re-read when the refresh interval has passed."""
        now = self._clock()
        if self._read_at is None or now - self._read_at >= self.refresh_interval:
            fresh = quota(self._env)
            if fresh is not None:
                self.quota = fresh
            self._read_at = now
        return self.quota

    def step(self, busy_seconds: float) -> float:
        """Sleeps after ``busy_seconds`` of GPU work so the duty cycle stays within the SM
        limit; returns the seconds slept."""
        q = self.current()
        if q is None or busy_seconds <= 0:
            return 0.0
        pause = busy_seconds * (1.0 / q.sm_limit - 1.0)
        if pause > 0:
            self._sleep(pause)
            self.slept += pause
        return max(0.0, pause)


@dataclass(frozen=True)
class ServiceInstance:
    """Which service instance this process is (the daemon starts each instance of an inference
    service with ``TESSERA_SERVICE``, ``TESSERA_SERVICE_NAME``, ``TESSERA_INSTANCE`` and
    ``TESSERA_ATTEMPT``; ``attempt`` grows when the instance is restarted)."""

    service: int
    name: str
    instance: int
    attempt: int


def instance(env: Optional[Mapping[str, str]] = None) -> Optional[ServiceInstance]:
    """This process's service instance, or None outside one (a training job, or no daemon).
    Never raises. Its quota is :func:`quota` and :class:`Throttle`, exactly as for a job."""
    env = os.environ if env is None else env
    try:
        service = int(env["TESSERA_SERVICE"])
        inst = int(env["TESSERA_INSTANCE"])
    except (KeyError, TypeError, ValueError):
        return None
    return ServiceInstance(
        service=service,
        name=env.get("TESSERA_SERVICE_NAME", ""),
        instance=inst,
        attempt=max(0, _int_env(env, "TESSERA_ATTEMPT", 0)),
    )


def report_load(
    queue_length: int,
    in_flight: int = 0,
    requests_per_second: float = 0.0,
    p50_latency_seconds: float = 0.0,
    p99_latency_seconds: float = 0.0,
    completed: int = 0,
    violations: int = 0,
    env: Optional[Mapping[str, str]] = None,
    timeout: float = 5.0,
) -> bool:
    """Reports a service instance's load to the daemon (what its policy sees of the service:
    queue length, requests in flight, arrival rate, recent latencies, completions and SLO
    violations in the instance's recent window). Returns True when accepted; False outside a
    daemon-run instance or on any failure (never raises)."""
    env = os.environ if env is None else env
    me = instance(env)
    url, token = env.get("TESSERA_URL"), env.get("TESSERA_JOB_TOKEN") or env.get("TESSERA_TOKEN")
    if me is None or not url or not token:
        return False
    body = {
        "queueLength": max(0, int(queue_length)),
        "inFlight": max(0, int(in_flight)),
        "requestsPerSecond": float(requests_per_second),
        "p50LatencySeconds": float(p50_latency_seconds),
        "p99LatencySeconds": float(p99_latency_seconds),
        "completed": max(0, int(completed)),
        "violations": max(0, int(violations)),
    }
    req = urllib.request.Request(
        f"{url.rstrip('/')}/v1/services/{me.service}/instances/{me.instance}/load",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            resp.read()
        return True
    except Exception as e:  # noqa: BLE001 - the documented contract is "never raises"
        log.debug("tessera load report failed: %s", e)
        return False


def checkpoint_on_sigterm(save: Callable[[], None], exit_code: int = 0) -> None:
    """The preemption contract: when the daemon preempts or moves the job (a resize, another
    cell, a retune the backend cannot carry out in place) it sends SIGTERM and, a grace period
    later, SIGKILL. This installs a SIGTERM handler that calls ``save()`` (write a checkpoint)
    and exits. The next attempt starts with ``TESSERA_START_ITERATION`` and possibly a new
    plan (:func:`plan`) and quota (:func:`quota`): resume from the checkpoint with those."""
    import signal
    import sys

    def handler(signum, frame):  # noqa: ARG001 - signal handler signature
        try:
            save()
        finally:
            sys.exit(exit_code)

    signal.signal(signal.SIGTERM, handler)
