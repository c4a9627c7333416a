"""End to end: a job started by the real daemon (local backend) uses the SDK to report progress.

Needs the `tesserad` binary: set TESSERA_DAEMON_BIN (scripts/test-daemon.sh does). Without it the
test skips, except under CI=true, where it fails.
"""

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

SDK_SRC = Path(__file__).resolve().parents[1] / "src"
TOKEN = "alice-sdk-test-token"


def daemon_bin():
    path = os.environ.get("TESSERA_DAEMON_BIN")
    if path and Path(path).is_file():
        return path
    if os.environ.get("CI") == "true":
        pytest.fail("CI=true but TESSERA_DAEMON_BIN does not point at the tesserad binary")
    pytest.skip("TESSERA_DAEMON_BIN not set")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(url, method="GET", body=None, token=TOKEN):
    req = urllib.request.Request(url, method=method, data=body,
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


@pytest.fixture
def daemon(tmp_path):
    binary = daemon_bin()
    port = free_port()
    config = tmp_path / "tessera.yaml"
    config.write_text(
        f"listen: 127.0.0.1:{port}\n"
        f"store: {tmp_path / 'tessera.db'}\n"
        "pollIntervalMs: 100\n"
        "tenants:\n"
        f"  - {{name: alice, tokenSha256: {hashlib.sha256(TOKEN.encode()).hexdigest()}}}\n"
        "backend:\n"
        "  kind: local\n"
        f"  workDir: {tmp_path / 'runs'}\n"
        "  nodes: [{name: box, gpu: A100-80GB, gpus: 2, cpus: 6, memory: 16Gi}]\n"
    )
    log = open(tmp_path / "daemon.log", "wb")
    proc = subprocess.Popen([binary, "--config", str(config)], stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(f"{url}/healthz", timeout=1)
            break
        except (urllib.error.URLError, OSError):
            if proc.poll() is not None:
                pytest.fail((tmp_path / "daemon.log").read_text())
            time.sleep(0.05)
    yield url, tmp_path
    proc.terminate()
    proc.wait(timeout=10)


def test_job_reports_progress_through_the_sdk(daemon):
    url, tmp = daemon
    script = (
        "#!/bin/sh\n"
        f"exec {sys.executable} - <<'PY'\n"
        "from tessera_sdk import TesseraIterator\n"
        "it = TesseraIterator(range(50), batch_size=8, report_interval=0)\n"
        "for _ in it:\n"
        "    pass\n"
        "print('workers', it.cpu_workers, 'reports', it.reports_sent)\n"
        "print('point', it.last_ack.point)\n"
        "PY\n"
    )
    spec = {"name": "sdk-job", "gpus": 1, "script": script, "env": {"PYTHONPATH": str(SDK_SRC)}}
    job = call(f"{url}/v1/jobs", "POST", json.dumps(spec).encode())
    deadline = time.time() + 60
    while time.time() < deadline:
        detail = call(f"{url}/v1/jobs/{job['id']}")
        if detail["state"] in ("completed", "failed", "cancelled"):
            break
        time.sleep(0.1)
    assert detail["state"] == "completed", detail
    assert detail["progress"]["iterations"] == 50
    assert detail["progress"]["samplesPerSecond"] > 0
    logs = list((tmp / "runs").glob(f"*-{job['id']}-1/output.log"))
    assert logs and "workers 3 reports 51" in logs[0].read_text(), logs and logs[0].read_text()
    # Each answer named the CPU/memory point the run holds (3 CPUs here).
    assert "point (3000, " in logs[0].read_text(), logs[0].read_text()
    # The job's own token could not have been used for anything else: a wrong token is refused.
    with pytest.raises(urllib.error.HTTPError) as e:
        call(f"{url}/v1/jobs", token="not-a-token")
    assert e.value.code == 401


def test_job_reads_its_plan_through_the_sdk(daemon):
    url, tmp = daemon
    script = (
        "#!/bin/sh\n"
        f"exec {sys.executable} - <<'PY'\n"
        "import tessera_sdk\n"
        "p = tessera_sdk.plan()\n"
        "print('plan', p.data, p.tensor, p.pipeline, p.gpu_type, p.attempt,\n"
        "      [s['devices'] for s in p.placement], tessera_sdk.quota())\n"
        "PY\n"
    )
    spec = {"name": "plan-job", "gpus": 2, "script": script, "env": {"PYTHONPATH": str(SDK_SRC)}}
    job = call(f"{url}/v1/jobs", "POST", json.dumps(spec).encode())
    deadline = time.time() + 60
    while time.time() < deadline:
        detail = call(f"{url}/v1/jobs/{job['id']}")
        if detail["state"] in ("completed", "failed", "cancelled"):
            break
        time.sleep(0.1)
    assert detail["state"] == "completed", detail
    logs = list((tmp / "runs").glob(f"*-{job['id']}-1/output.log"))
    # FIFO gives whole GPUs and no plan: data-parallel over both, no quota.
    expected = "plan 2 1 1 A100-80GB 1 [{'indices': [0, 1], 'part': {'kind': 'whole'}}] None\n"
    assert logs and logs[0].read_text() == expected, logs and logs[0].read_text()
