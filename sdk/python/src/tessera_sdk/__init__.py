"""Tessera job SDK: wrap a training loop's data iterator to report progress to the daemon.

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
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

__all__ = ["JobContext", "ProgressAck", "TesseraIterator", "report_progress"]
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
            token=env.get("TESSERA_TOKEN") or None,
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


def report_progress(
    ctx: JobContext,
    iterations: int,
    samples_per_second: Optional[float] = None,
    iterations_per_second: Optional[float] = None,
    timeout: float = 5.0,
) -> Optional[ProgressAck]:
    """Sends one progress report; returns the daemon's answer, or None (never raises)."""
    if not ctx.enabled:
        return None
    body = {"iterations": int(iterations)}
    if samples_per_second is not None:
        body["samplesPerSecond"] = float(samples_per_second)
    if iterations_per_second is not None:
        body["iterationsPerSecond"] = float(iterations_per_second)
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
        ack = report_progress(self.context, self.iteration, sps, ips)
        if ack is None:
            return None
        self.reports_sent += 1
        self.last_ack = ack
        if ack.cpu_workers >= 1 and ack.cpu_workers != self._cpu_workers:
            self._cpu_workers = ack.cpu_workers
            if self.on_resize is not None:
                self.on_resize(ack.cpu_workers)
        return ack

    def close(self) -> None:
        """Sends a final report."""
        self.report(force=True)
