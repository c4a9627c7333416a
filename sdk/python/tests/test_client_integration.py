"""The Python client (tessera_sdk.client) against a live daemon (local backend, the tessera
policy): jobs, the queue, services, nodes, events, errors.

Needs the `tesserad` binary: set TESSERA_DAEMON_BIN (scripts/test-daemon.sh does). Without it the
test skips, except under CI=true, where it fails.
"""

import hashlib
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tessera_sdk.client import Client, TesseraError
from test_daemon_integration import daemon_bin, free_port

ALICE = "alice-client-token"
OPS = "ops-client-token"

SERVICE = """apiVersion: tessera/v1
kind: Workload
metadata:
  command: [sleep, "600"]
spec:
  services:
    - name: bert
      startSeconds: 0
      endSeconds: 86400
      sloMilliseconds: 50
      maxBatch: 8
      coldStartSeconds: 5
      resources: {cpu: '1', memory: 4Gi, gpuMemory: 8Gi, smRequest: 0.3, smLimit: 0.5}
      arrivals: {poisson: {rate: 50}}
"""


def sha(t):
    return hashlib.sha256(t.encode()).hexdigest()


@pytest.fixture
def daemon(tmp_path):
    binary = daemon_bin()
    port = free_port()
    config = tmp_path / "tessera.yaml"
    config.write_text(
        f"listen: 127.0.0.1:{port}\n"
        f"store: {tmp_path / 'tessera.db'}\n"
        "policy: tessera\n"
        "pollIntervalMs: 100\n"
        "tenants:\n"
        f"  - {{name: alice, tokenSha256: {sha(ALICE)}}}\n"
        f"  - {{name: ops, tokenSha256: {sha(OPS)}, admin: true}}\n"
        "backend:\n"
        "  kind: local\n"
        f"  workDir: {tmp_path / 'runs'}\n"
        "  nodes: [{name: box, gpu: A100-80GB, gpus: 2, cpus: 8, memory: 32Gi}]\n"
    )
    log = open(tmp_path / "daemon.log", "wb")
    proc = subprocess.Popen([binary, "--config", str(config)], stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    probe = Client(url, token=ALICE, env={})
    for _ in range(200):
        try:
            probe.nodes()
            break
        except TesseraError:
            if proc.poll() is not None:
                pytest.fail((tmp_path / "daemon.log").read_text())
            time.sleep(0.05)
    yield url
    # Stop what the jobs run, then the daemon (only processes this fixture started).
    admin = Client(url, token=OPS, env={})
    for job in admin.list():
        if job["state"] not in ("completed", "failed", "cancelled"):
            admin.cancel(job["id"])
    for svc in admin.services():
        if svc["state"] != "retired":
            admin.retire_service(svc["id"])
    deadline = time.time() + 20
    while time.time() < deadline and (
        any(j["state"] not in ("completed", "failed", "cancelled") for j in admin.list())
        or any(s["instances"] for s in admin.services())
    ):
        time.sleep(0.1)
    proc.terminate()
    proc.wait(timeout=10)


def wait(what, f, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = f()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def test_client_jobs_queue_services_nodes_events(daemon):
    alice = Client(daemon, token=ALICE, env={})
    ops = Client(daemon, token=OPS, env={})

    # Jobs: YAML text and a dict; one runs, the next waits behind it.
    first = alice.submit("name: first\ncommand: [sleep, '600']\ngpus: 2\n")
    second = alice.submit({"name": "second", "command": ["true"], "gpus": 2})
    assert first["name"] == "first" and second["state"] == "pending"
    wait("the first job to run", lambda: alice.describe(first["id"])["state"] == "running")
    detail = alice.describe(second["id"])
    assert detail["state"] == "pending" and detail["pendingReason"], detail
    assert [j["name"] for j in alice.list()] == ["first", "second"]
    assert [j["id"] for j in alice.list(state="pending")] == [second["id"]]
    q = alice.queue()
    assert q["policy"] == "tessera" and [j["id"] for j in q["pending"]] == [second["id"]]

    # Nodes: the running job holds both GPUs; drain is for admins.
    (box,) = alice.nodes()
    assert box["name"] == "box" and box["gpusAllocated"] == 2
    with pytest.raises(TesseraError) as e:
        alice.drain("box")
    assert e.value.status == 403
    assert ops.drain("box")[0]["health"] == "draining"
    assert ops.undrain("box")[0]["health"] == "up"
    with pytest.raises(ValueError):
        ops.set_node_health("box", "sideways")

    # Cancel: the second job runs then completes.
    assert alice.cancel(first["id"])["state"] == "cancelled"
    wait("the second job to complete", lambda: alice.describe(second["id"])["state"] == "completed")
    with pytest.raises(TesseraError) as e:
        alice.cancel(second["id"])
    assert e.value.status == 409

    # Services: submit, list, describe, retire.
    svc = alice.submit_service(SERVICE)
    assert svc["name"] == "bert" and svc["state"] == "active"
    running = wait("an instance", lambda: [i for i in alice.service(svc["id"])["instances"]
                                           if i["state"] == "running"])
    assert running[0]["allocation"][0]["devices"]["part"]["kind"] == "quota"
    assert [s["id"] for s in alice.services()] == [svc["id"]]
    assert alice.retire_service(svc["id"])["state"] == "retired"

    # Events: the jobs' starts and ends and the instance's scaling, in order.
    kinds = [(e["kind"], e.get("name")) for e in ops.events()]
    for expected in [("started", "first"), ("finished", "first"), ("started", "second"),
                     ("finished", "second"), ("scaled-out", "bert")]:
        assert expected in kinds, kinds
    last = ops.events()[-1]["seq"]
    assert ops.events(after=last) == []
    assert len(ops.events(limit=2)) == 2


def test_client_errors_and_environment(daemon):
    # No token: 401 with the hint; an unknown job: 404; an unreachable daemon: status 0.
    with pytest.raises(TesseraError) as e:
        Client(daemon, env={}).list()
    assert e.value.status == 401 and "TESSERA_API_TOKEN" in e.value.message
    alice = Client(daemon, token=ALICE, env={})
    with pytest.raises(TesseraError) as e:
        alice.describe(999)
    assert e.value.status == 404 and e.value.code == "not_found"
    with pytest.raises(TesseraError) as e:
        Client("http://127.0.0.1:1", token=ALICE, env={}, timeout=2).list()
    assert e.value.status == 0
    # A service document given as a job is named as such.
    with pytest.raises(TesseraError) as e:
        alice.submit(SERVICE)
    assert e.value.status == 400 and "services submit" in e.value.message

    # The environment, as the CLI reads it.
    env = {"TESSERA_URL": daemon, "TESSERA_API_TOKEN": ALICE}
    assert Client(env=env).nodes()[0]["name"] == "box"
    old = {"TESSERA_SERVER": daemon, "TESSERA_TOKEN": ALICE}
    assert Client(env=old).token == ALICE
    in_job = {"TESSERA_URL": daemon, "TESSERA_TOKEN": "job-token", "TESSERA_JOB_ID": "3"}
    c = Client(env=in_job)
    assert c.url == daemon and c.token is None


def test_inside_a_job_the_client_does_not_take_the_jobs_token(daemon, tmp_path):
    """Issue 41: a job gets TESSERA_JOB_TOKEN (and TESSERA_TOKEN, the same), and a client made
    inside it finds the daemon from TESSERA_URL but takes neither as a tenant's token."""
    alice = Client(daemon, token=ALICE, env={})
    src = str(Path(__file__).resolve().parents[1] / "src")
    script = (
        "#!/bin/sh\n"
        'test -n "$TESSERA_JOB_TOKEN" && test "$TESSERA_JOB_TOKEN" = "$TESSERA_TOKEN" || exit 3\n'
        f"exec {sys.executable} - <<'PY'\n"
        "from tessera_sdk.client import Client\n"
        "c = Client()\n"
        "print('client', c.url, c.token)\n"
        "PY\n"
    )
    job = alice.submit({"name": "inside", "gpus": 1, "script": script, "env": {"PYTHONPATH": src}})
    wait("the job to end", lambda: alice.describe(job["id"])["state"] in ("completed", "failed"))
    assert alice.describe(job["id"])["state"] == "completed", alice.describe(job["id"])
    runs = tmp_path / "runs"
    logs = list(runs.glob(f"*-{job['id']}-1/output.log"))
    assert logs and logs[0].read_text() == f"client {daemon} None\n", logs and logs[0].read_text()
