"""Unit tests of the SDK against a tiny fake daemon (stdlib http.server)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from tessera_sdk import JobContext, TesseraIterator, report_progress


class FakeDaemon:
    def __init__(self, workers=4, status=200):
        self.requests = []
        self.workers = workers
        self.status = status
        self.point = None
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                outer.requests.append((self.path, self.headers.get("Authorization"), body))
                doc = {"state": "running", "cpuWorkers": outer.workers, "gpus": 2, "memoryBytes": 1024}
                if outer.point is not None:
                    doc["point"] = outer.point
                answer = json.dumps(doc).encode()
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def daemon():
    d = FakeDaemon()
    yield d
    d.close()


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def ctx(url, **kw):
    base = dict(url=url, job_id=7, token="tok", cpu_workers=2, start_iteration=0)
    base.update(kw)
    return JobContext(**base)


def test_context_from_env():
    c = JobContext.from_env(
        {"TESSERA_URL": "http://x", "TESSERA_JOB_ID": "12", "TESSERA_TOKEN": "t",
         "TESSERA_CPU_WORKERS": "6", "TESSERA_START_ITERATION": "40"}
    )
    assert (c.url, c.job_id, c.token, c.cpu_workers, c.start_iteration) == ("http://x", 12, "t", 6, 40)
    assert c.enabled
    empty = JobContext.from_env({"TESSERA_CPU_WORKERS": "junk"})
    assert not empty.enabled and empty.cpu_workers == 1


def test_iterator_yields_everything_and_reports_throughput(daemon):
    clock = FakeClock()
    resized = []
    it = TesseraIterator(range(10), batch_size=32, report_interval=1.0, context=ctx(daemon.url),
                         on_resize=resized.append, clock=clock)
    assert it.cpu_workers == 2
    out = []
    for x in it:
        out.append(x)
        clock.t += 0.25  # 4 iterations per second
    assert out == list(range(10))
    paths = {p for p, _, _ in daemon.requests}
    assert paths == {"/v1/jobs/7/progress"}
    assert all(auth == "Bearer tok" for _, auth, _ in daemon.requests)
    bodies = [b for _, _, b in daemon.requests]
    assert bodies[-1]["iterations"] == 10  # the final report at exhaustion
    rated = [b for b in bodies if "iterationsPerSecond" in b]
    # Steady state: 4 iterations/s, 128 samples/s (the first window also counts the first fetch).
    assert len(rated) >= 2
    assert abs(rated[1]["iterationsPerSecond"] - 4.0) < 1e-6
    assert abs(rated[1]["samplesPerSecond"] - 4.0 * 32) < 1e-6
    # Reports are rate limited: far fewer than iterations.
    assert len(bodies) <= 4
    assert it.cpu_workers == 4 and resized == [4]


def test_resumes_iteration_count_after_preemption(daemon):
    it = TesseraIterator([1, 2], context=ctx(daemon.url, start_iteration=100), report_interval=0)
    list(it)
    assert daemon.requests[-1][2]["iterations"] == 102


def test_no_daemon_means_no_reports_and_no_errors():
    it = TesseraIterator(range(3), context=JobContext(url=None, job_id=None, token=None))
    assert list(it) == [0, 1, 2]
    assert it.reports_sent == 0
    # A daemon that is down or answers errors never breaks training.
    down = ctx("http://127.0.0.1:9")
    assert report_progress(down, 5, timeout=0.5) is None
    assert list(TesseraIterator(range(2), context=down, report_interval=0)) == [0, 1]


def test_error_answers_are_ignored():
    d = FakeDaemon(status=500)
    try:
        it = TesseraIterator(range(3), context=ctx(d.url), report_interval=0)
        assert list(it) == [0, 1, 2]
        assert it.cpu_workers == 2 and it.reports_sent == 0
    finally:
        d.close()


class OddDaemon:
    """Answers every report with a fixed raw reply (status line, headers and all)."""

    def __init__(self, raw):
        import socket

        self.raw = raw
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    conn.recv(65536)
                    conn.sendall(self.raw)
                except OSError:
                    pass

    def close(self):
        self.sock.close()


@pytest.mark.parametrize(
    "raw",
    [
        # Truncated: fewer body bytes than announced, then the connection closes.
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"state\": \"run",
        # Not HTTP at all.
        b"garbage\r\n\r\n",
        # JSON, but not an object.
        b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n[1, 2, 3]",
        # An object with values of the wrong types.
        b"HTTP/1.1 200 OK\r\nContent-Length: 33\r\n\r\n{\"cpuWorkers\": {\"a\": 1}, \"gpus\": []}",
        # Not UTF-8.
        b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n\xff\xfe\xfd\xfc",
        # Nothing at all.
        b"",
    ],
)
def test_report_progress_never_raises_on_broken_replies(raw):
    d = OddDaemon(raw)
    try:
        assert report_progress(ctx(d.url), 5, timeout=2.0) is None
        it = TesseraIterator(range(3), context=ctx(d.url), report_interval=0)
        assert list(it) == [0, 1, 2]
    finally:
        d.close()


# --- plan, quota and the throttle -------------------------------------------------------------

from tessera_sdk import Plan, Quota, Throttle, plan, quota  # noqa: E402


def test_plan_reads_the_file_then_the_environment(tmp_path):
    f = tmp_path / "plan.json"
    f.write_text(
        json.dumps(
            {
                "data": 2,
                "tensor": 4,
                "pipeline": 1,
                "gpuType": "A100-80GB",
                "attempt": 3,
                "placement": [{"node": "n1", "gpus": 8}],
            }
        )
    )
    p = plan({"TESSERA_PLAN_FILE": str(f), "TESSERA_PLAN_DP": "9"})
    assert p == Plan(2, 4, 1, "A100-80GB", 3, ({"node": "n1", "gpus": 8},))
    assert p.devices == 8
    env = {"TESSERA_PLAN_DP": "2", "TESSERA_PLAN_TP": "1", "TESSERA_PLAN_PP": "2",
           "TESSERA_GPU_TYPE": "V100-32GB", "TESSERA_ATTEMPT": "1"}
    assert plan(env) == Plan(2, 1, 2, "V100-32GB", 1)
    # A missing or broken file falls back to the variables; nothing at all is one replica.
    assert plan(dict(env, TESSERA_PLAN_FILE=str(tmp_path / "nope"))) == Plan(2, 1, 2, "V100-32GB", 1)
    f.write_text("{not json")
    assert plan({"TESSERA_PLAN_FILE": str(f)}) == Plan()
    assert plan({"TESSERA_PLAN_DP": "-3", "TESSERA_PLAN_TP": "x"}) == Plan()


def test_quota_reads_the_file_and_refuses_garbage(tmp_path):
    f = tmp_path / "quota.json"
    f.write_text('{"gpus":[1,2],"memoryBytes":10737418240,"smLimitPermille":500,'
                 '"smRequestPermille":300,"version":1}')
    q = quota({"TESSERA_QUOTA_FILE": str(f)})
    assert q == Quota(1, 300, 500, 10737418240, (1, 2))
    assert (q.sm_request, q.sm_limit) == (0.3, 0.5)
    assert quota({}) is None
    f.write_text('{"version": "x"}')
    assert quota({"TESSERA_QUOTA_FILE": str(f)}) is None


def test_throttle_keeps_the_duty_cycle_and_follows_a_retune(tmp_path):
    f = tmp_path / "quota.json"

    def write(version, limit):
        f.write_text(json.dumps({"gpus": [0], "memoryBytes": 1, "smLimitPermille": limit,
                                 "smRequestPermille": 100, "version": version}))

    write(1, 250)
    now = [0.0]
    slept = []
    t = Throttle({"TESSERA_QUOTA_FILE": str(f)}, refresh_interval=10.0,
                 clock=lambda: now[0], sleep=slept.append)
    # 1 s of work at a 25% limit: 3 s of pause, so work is a quarter of the time.
    assert t.step(1.0) == pytest.approx(3.0)
    write(2, 500)
    now[0] = 5.0
    assert t.step(1.0) == pytest.approx(3.0), "not re-read before the refresh interval"
    now[0] = 11.0
    assert t.step(1.0) == pytest.approx(1.0), "the retune is seen"
    assert t.quota.version == 2
    write(3, 1000)
    now[0] = 30.0
    assert t.step(1.0) == 0.0
    assert slept == pytest.approx([3.0, 3.0, 1.0])
    # Without a quota file the throttle does nothing.
    assert Throttle({}).step(1.0) == 0.0


def test_instance_reads_the_service_environment():
    from tessera_sdk import ServiceInstance, instance

    env = {"TESSERA_SERVICE": "3", "TESSERA_SERVICE_NAME": "bert", "TESSERA_INSTANCE": "12",
           "TESSERA_ATTEMPT": "2"}
    assert instance(env) == ServiceInstance(service=3, name="bert", instance=12, attempt=2)
    assert instance({}) is None, "a training job is no instance"
    assert instance({"TESSERA_SERVICE": "x", "TESSERA_INSTANCE": "1"}) is None
    assert instance({"TESSERA_SERVICE": "1", "TESSERA_INSTANCE": "1"}).attempt == 0


def test_report_load_posts_to_the_instance_and_never_raises(daemon):
    from tessera_sdk import report_load

    env = {"TESSERA_URL": daemon.url, "TESSERA_TOKEN": "inst-tok", "TESSERA_SERVICE": "3",
           "TESSERA_INSTANCE": "12", "TESSERA_ATTEMPT": "1"}
    assert report_load(5, in_flight=2, requests_per_second=40.5, p99_latency_seconds=0.08,
                       completed=100, violations=3, env=env)
    path, auth, body = daemon.requests[-1]
    assert path == "/v1/services/3/instances/12/load"
    assert auth == "Bearer inst-tok"
    assert body == {"queueLength": 5, "inFlight": 2, "requestsPerSecond": 40.5,
                    "p50LatencySeconds": 0.0, "p99LatencySeconds": 0.08, "completed": 100,
                    "violations": 3}
    assert not report_load(1, env={}), "outside an instance nothing is sent"
    daemon.status = 403
    assert not report_load(1, env=env)
    assert not report_load(1, env=dict(env, TESSERA_URL="http://127.0.0.1:9"))


def test_rates_name_the_cpu_memory_point_they_were_measured_at(daemon):
    """Optimistic profiling's protocol: each answer gives the job its CPU/memory point; the
    next report's rate is measured wholly at it and names it. No point before the first
    answer, none from a daemon that gives none."""
    clock = FakeClock()
    it = TesseraIterator(range(40), report_interval=1.0, context=ctx(daemon.url), clock=clock)
    daemon.point = {"cpuMilli": 4000, "memoryBytes": 8 << 30}
    for i, _ in enumerate(it):
        clock.t += 0.25
        if i == 20:
            daemon.point = {"cpuMilli": 8000, "memoryBytes": 16 << 30}  # a retune
    bodies = [b for _, _, b in daemon.requests]
    points = [b.get("point") for b in bodies]
    assert points[0] is None, "nothing known before the first answer"
    first, second = {"cpuMilli": 4000, "memoryBytes": 8 << 30}, {"cpuMilli": 8000, "memoryBytes": 16 << 30}
    assert first in points and second in points
    # Once the answers carry the new point, every later report names it.
    k = points.index(second)
    assert all(p == second for p in points[k:]) and all(p in (None, first) for p in points[:k])
    assert it.last_ack is not None and it.last_ack.point == (8000, 16 << 30)
    # A malformed point is dropped, not sent back.
    daemon.point = {"cpuMilli": "lots"}
    assert report_progress(ctx(daemon.url), 1).point is None
