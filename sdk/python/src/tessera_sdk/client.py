"""A client of the Tessera daemon's API for people and scripts (what the ``tessera`` CLI verbs
do), beside the in-job SDK. Standard library only.

>>> from tessera_sdk.client import Client
>>> c = Client("http://127.0.0.1:8765", token="...")      # or from the environment
>>> job = c.submit({"name": "demo", "command": ["sleep", "10"], "gpus": 1})
>>> c.describe(job["id"])["state"], c.describe(job["id"]).get("pendingReason")

Answers are the API's JSON (dicts and lists, camelCase keys as in docs/daemon.md). A refused
call raises :class:`TesseraError` with the HTTP status, the error code and the message.

Address and token default to the environment as the CLI reads it: ``TESSERA_URL`` (else
``TESSERA_SERVER``, else ``http://127.0.0.1:8765``) and ``TESSERA_API_TOKEN`` (else
``TESSERA_TOKEN``, but not inside a job or service instance, where ``TESSERA_TOKEN`` is the
run's own token, which may only report progress or load).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, List, Mapping, Optional, Union

__all__ = ["Client", "TesseraError", "DEFAULT_URL"]

DEFAULT_URL = "http://127.0.0.1:8765"
# Set in the environment of a job or service instance: there TESSERA_TOKEN is the run's own.
_RUN_MARKERS = ("TESSERA_JOB_TOKEN", "TESSERA_JOB_ID", "TESSERA_INSTANCE")


class TesseraError(Exception):
    """A call the daemon refused (``status`` 4xx/5xx) or could not be made (``status`` 0)."""

    def __init__(self, status: int, code: str, message: str):
        self.status = status
        self.code = code
        self.message = message
        super().__init__(f"{code} ({status}): {message}" if status else message)


def _resolve(url: Optional[str], token: Optional[str], env: Mapping[str, str]):
    url = url or env.get("TESSERA_URL") or env.get("TESSERA_SERVER") or DEFAULT_URL
    if token is None:
        token = env.get("TESSERA_API_TOKEN") or None
    if token is None and not any(env.get(m) for m in _RUN_MARKERS):
        token = env.get("TESSERA_TOKEN") or None
    return url.rstrip("/"), token


class Client:
    """One daemon, one token."""

    def __init__(
        self,
        url: Optional[str] = None,
        token: Optional[str] = None,
        timeout: float = 60.0,
        env: Optional[Mapping[str, str]] = None,
    ):
        self.url, self.token = _resolve(url, token, os.environ if env is None else env)
        self.timeout = timeout

    # --- transport ---------------------------------------------------------------------

    def _call(self, method: str, path: str, body: Optional[bytes] = None,
              content_type: str = "application/json") -> Any:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if body is not None:
            headers["Content-Type"] = content_type
        req = urllib.request.Request(self.url + path, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                err = json.loads(raw)["error"]
                code, message = str(err.get("code", "error")), str(err.get("message", ""))
            except (ValueError, KeyError, TypeError):
                code, message = "error", raw[:200].decode("utf-8", "replace")
            if e.code == 401:
                message += (" (pass token= or set TESSERA_API_TOKEN"
                            + ("" if self.token else "; no token was given") + ")")
            raise TesseraError(e.code, code, message) from None
        except (urllib.error.URLError, OSError) as e:
            raise TesseraError(0, "unreachable", f"cannot reach the daemon at {self.url}: {e}") from None

    @staticmethod
    def _document(spec: Union[str, bytes, Mapping[str, Any]]):
        """A spec as sent: text (YAML or JSON) as is, a mapping as JSON."""
        if isinstance(spec, Mapping):
            return json.dumps(spec).encode(), "application/json"
        data = spec.encode() if isinstance(spec, str) else spec
        kind = "application/json" if data.lstrip().startswith(b"{") else "application/yaml"
        return data, kind

    # --- jobs --------------------------------------------------------------------------

    def submit(self, spec: Union[str, bytes, Mapping[str, Any]]) -> Dict[str, Any]:
        """Submits a job spec (YAML/JSON text, or a dict); returns the job as created."""
        body, kind = self._document(spec)
        return self._call("POST", "/v1/jobs", body, kind)

    def list(self, state: Optional[str] = None, queue: Optional[str] = None) -> List[Dict[str, Any]]:
        """Jobs visible to this token (every page), optionally in one state or queue."""
        jobs: List[Dict[str, Any]] = []
        after = None
        while True:
            query = {k: v for k, v in (("state", state), ("queue", queue), ("after", after)) if v is not None}
            page = self._call("GET", "/v1/jobs" + ("?" + urllib.parse.urlencode(query) if query else ""))
            jobs.extend(page["jobs"])
            after = page.get("nextAfter")
            if after is None:
                return jobs

    def describe(self, job_id: int) -> Dict[str, Any]:
        """One job with its spec, history, pending reason and queue position."""
        return self._call("GET", f"/v1/jobs/{int(job_id)}")

    def cancel(self, job_id: int) -> Dict[str, Any]:
        """Cancels a job; returns it."""
        return self._call("DELETE", f"/v1/jobs/{int(job_id)}")

    def queue(self) -> Dict[str, Any]:
        """The policy, per-queue counts and the pending jobs in scheduling order."""
        return self._call("GET", "/v1/queue")

    def events(self, after: Optional[int] = None, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        """Recent events (job started, finished, preempted; GPU reconfigured; instance scaled)."""
        query = {k: v for k, v in (("after", after), ("limit", limit)) if v is not None}
        path = "/v1/events" + ("?" + urllib.parse.urlencode(query) if query else "")
        return self._call("GET", path)["events"]

    # --- services ----------------------------------------------------------------------

    def submit_service(self, document: Union[str, bytes, Mapping[str, Any]]) -> Dict[str, Any]:
        """Submits an inference service (a ``kind: Workload`` document with one service)."""
        body, kind = self._document(document)
        return self._call("POST", "/v1/services", body, kind)

    def services(self) -> List[Dict[str, Any]]:
        """Services visible to this token."""
        return self._call("GET", "/v1/services")["services"]

    def service(self, service_id: int) -> Dict[str, Any]:
        """One service with its instances and their load."""
        return self._call("GET", f"/v1/services/{int(service_id)}")

    def retire_service(self, service_id: int) -> Dict[str, Any]:
        """Retires a service (every instance stopped)."""
        return self._call("DELETE", f"/v1/services/{int(service_id)}")

    # --- nodes -------------------------------------------------------------------------

    def nodes(self) -> List[Dict[str, Any]]:
        """The nodes with capacity, allocation, health and each GPU's state."""
        return self._call("GET", "/v1/nodes")["nodes"]

    def set_node_health(self, node: str, health: str) -> List[Dict[str, Any]]:
        """Admins: ``down`` (stop and requeue its jobs), ``draining`` or ``up``."""
        if health not in ("up", "draining", "down"):
            raise ValueError(f"health must be up, draining or down, not {health!r}")
        body = json.dumps({"health": health}).encode()
        path = f"/v1/nodes/{urllib.parse.quote(node, safe='')}/health"
        return self._call("POST", path, body)["nodes"]

    def drain(self, node: str) -> List[Dict[str, Any]]:
        """Admins: place nothing new on ``node``."""
        return self.set_node_health(node, "draining")

    def undrain(self, node: str) -> List[Dict[str, Any]]:
        """Admins: hand ``node``'s health back to the backend."""
        return self.set_node_health(node, "up")
