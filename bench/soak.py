#!/usr/bin/python3
"""Soak: mixed traffic against a real ditserve-frontend + 2 CPU workers on loopback for a bounded
time, then a report of requests per outcome, crashes, and the processes' RSS and open file
descriptors at the start and the end.

    /usr/bin/python3 bench/soak.py [--build build] [--minutes 10] [--clients 6] [--out FILE]

Traffic (each client thread loops, picking at random): unary and streaming generations of the tiny
fixture call, streams cancelled after their first step, calls with a deadline shorter than the job,
invalid requests (a field over its limit), bursts that overflow the admission queue (--max-queue 4),
ModelInfo and health calls, and /metrics scrapes. A crash is a frontend or worker process that
exits (a worker's pid changes when the group re-forms) or a call that fails in a way its kind does
not allow. Exit status 0 when there was none and RSS / fds stayed within the stated bounds.

Needs python3-grpcio and the generated stubs (the build's `ditserve_python_stubs` target)."""
import argparse
import collections
import os
import random
import subprocess
import sys
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RSS_GROWTH_LIMIT_MB = 64  # per process, end against start (after warm-up)
FD_GROWTH_LIMIT = 16


def load_stubs(stubs):
    sys.path.insert(0, stubs)
    import grpc
    grpc.__path__.append(os.path.join(stubs, "grpc"))
    from ditserve.v1 import ditserve_pb2, ditserve_pb2_grpc
    from grpc.health.v1 import health_pb2, health_pb2_grpc
    return grpc, ditserve_pb2, ditserve_pb2_grpc, health_pb2, health_pb2_grpc


def proc_stats(pid):
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024.0
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def children(pid):
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = open(f"/proc/{name}/stat").read()
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[1]) != pid or fields[0] == "Z":
                continue
            argv = open(f"/proc/{name}/cmdline", "rb").read().split(b"\0")
            if b"--rank" in argv:
                out[int(argv[argv.index(b"--rank") + 1])] = int(name)
        except (OSError, ValueError, IndexError):
            continue
    return out


class Soak:
    def __init__(self, a, mods):
        self.a = a
        self.grpc, self.pb, self.pb_grpc, self.hpb, self.hpb_grpc = mods
        self.outcomes = collections.Counter()
        self.unexpected = []
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def start_server(self):
        b = self.a.build
        self.log = open(os.path.join(self.a.workdir, "frontend.log"), "w")
        self.proc = subprocess.Popen(
            [f"{b}/server/ditserve-frontend", "--model", f"{REPO}/tests/fixtures/flux1-tiny",
             "--spawn-workers", "2", "--max-queue", "4", "--listen", "127.0.0.1:0",
             "--metrics-listen", "127.0.0.1:0", "--worker-binary", f"{b}/worker/ditserve-worker"],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.port = self.mport = None
        while self.port is None or self.mport is None:
            line = self.proc.stdout.readline()
            if not line:
                raise SystemExit("the frontend exited at start; see " + self.log.name)
            if line.startswith("LISTENING "):
                self.port = int(line.split()[1])
            if line.startswith("METRICS "):
                self.mport = int(line.split()[1])
        self.channel = self.grpc.insecure_channel(f"127.0.0.1:{self.port}",
                                                  options=[("grpc.max_receive_message_length", 64 << 20)])
        self.stub = self.pb_grpc.ImageGenerationStub(self.channel)
        self.health = self.hpb_grpc.HealthStub(self.channel)
        deadline = time.time() + 300
        while time.time() < deadline:
            try:
                if self.health.Check(self.hpb.HealthCheckRequest(), timeout=5).status == 1:
                    return
            except self.grpc.RpcError:
                pass
            time.sleep(0.2)
        raise SystemExit("never SERVING")

    def request(self, steps=4, height=32, **kw):
        r = self.pb.GenerateRequest(prompt="a cat holding a sign that says hello", height=height,
                                    width=height, num_inference_steps=steps, guidance_scale=3.5,
                                    seed=random.randrange(1 << 31), max_sequence_length=32, **kw)
        return r

    def record(self, kind, code, allowed):
        with self.lock:
            self.outcomes[(kind, code)] += 1
            if code not in allowed:
                self.unexpected.append((kind, code))

    def call(self, kind, fn, allowed):
        try:
            fn()
            self.record(kind, "OK", allowed)
        except self.grpc.RpcError as e:
            self.record(kind, e.code().name, allowed)

    def one(self):
        busy = ("OK", "RESOURCE_EXHAUSTED")  # a full queue is an allowed answer under load
        kind = random.choices(
            ["unary", "stream", "cancel", "short_deadline", "invalid", "burst", "info", "health", "scrape"],
            weights=[20, 15, 10, 10, 10, 5, 10, 10, 10])[0]
        if kind == "unary":
            self.call(kind, lambda: self.stub.Generate(self.request(), timeout=120), busy)
        elif kind == "stream":
            self.call(kind, lambda: [e for e in self.stub.GenerateStream(self.request(), timeout=120)], busy)
        elif kind == "cancel":
            def cancel_after_first_step():
                it = self.stub.GenerateStream(self.request(steps=40), timeout=120)
                for ev in it:
                    if ev.HasField("progress"):
                        it.cancel()
            self.call(kind, cancel_after_first_step, ("OK", "CANCELLED", "RESOURCE_EXHAUSTED"))
        elif kind == "short_deadline":
            self.call(kind, lambda: self.stub.Generate(self.request(steps=60, height=64), timeout=0.2),
                      ("OK", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED"))
        elif kind == "invalid":
            self.call(kind, lambda: self.stub.Generate(self.request(height=33), timeout=30),
                      ("INVALID_ARGUMENT",))
        elif kind == "burst":
            futures = [self.stub.Generate.future(self.request(), timeout=120) for _ in range(8)]
            for f in futures:
                self.call(kind, f.result, busy)
        elif kind == "info":
            self.call(kind, lambda: self.stub.GetModelInfo(self.pb.GetModelInfoRequest(), timeout=10), ("OK",))
        elif kind == "health":
            def check():
                if self.health.Check(self.hpb.HealthCheckRequest(), timeout=10).status != 1:
                    raise RuntimeError("not SERVING")
            try:
                self.call(kind, check, ("OK",))
            except RuntimeError:
                self.record(kind, "NOT_SERVING", ("OK",))
        else:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.mport}/metrics", timeout=10).read()
                self.record(kind, "OK", ("OK",))
            except OSError as e:
                self.record(kind, "HTTP_ERROR: " + str(e), ("OK",))

    def client(self):
        while not self.stop.is_set():
            self.one()

    def snapshot(self):
        pids = {"frontend": self.proc.pid}
        pids.update({f"worker rank {r}": p for r, p in children(self.proc.pid).items()})
        return {name: (pid,) + proc_stats(pid) for name, pid in pids.items()}

    def run(self):
        self.start_server()
        for _ in range(5):  # warm-up: first-call allocations are not a leak
            self.stub.Generate(self.request(), timeout=120)
        start = self.snapshot()
        t0 = time.time()
        threads = [threading.Thread(target=self.client) for _ in range(self.a.clients)]
        for t in threads:
            t.start()
        self.stop.wait(self.a.minutes * 60)
        self.stop.set()
        for t in threads:
            t.join()
        elapsed = time.time() - t0
        time.sleep(2)  # let the last cancelled jobs settle
        end = self.snapshot()
        alive = self.proc.poll() is None
        self.proc.terminate()
        code = self.proc.wait(timeout=60)
        return start, end, elapsed, alive, code


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--out", default="")
    ap.add_argument("--workdir", default="/tmp")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    soak = Soak(a, load_stubs(os.path.join(a.build, "python")))
    start, end, elapsed, alive, code = soak.run()

    lines = [f"soak: {elapsed / 60:.1f} min, {a.clients} client threads, frontend + 2 CPU workers "
             f"(flux1-tiny, --max-queue 4), {time.strftime('%Y-%m-%d %H:%M')}",
             f"command: /usr/bin/python3 bench/soak.py --minutes {a.minutes:g} --clients {a.clients}", "",
             "requests per outcome:"]
    total = 0
    for (kind, code_name), n in sorted(soak.outcomes.items()):
        lines.append(f"  {kind:15s} {code_name:20s} {n}")
        total += n
    lines.append(f"  total {total} ({total / elapsed:.1f}/s)")
    lines.append("")
    lines.append("process           pid      RSS MiB start -> end   fds start -> end")
    failures = []
    for name in sorted(set(start) | set(end)):
        if name not in start or name not in end:
            failures.append(f"{name} appeared or disappeared")
            continue
        (p0, r0, f0), (p1, r1, f1) = start[name], end[name]
        lines.append(f"  {name:15s} {p0:<8d} {r0:8.1f} -> {r1:8.1f}   {f0:4d} -> {f1:4d}")
        if p0 != p1:
            failures.append(f"{name} was replaced (pid {p0} -> {p1}): a crash or a re-formed group")
        if r1 - r0 > RSS_GROWTH_LIMIT_MB:
            failures.append(f"{name} RSS grew {r1 - r0:.1f} MiB (> {RSS_GROWTH_LIMIT_MB})")
        if f1 - f0 > FD_GROWTH_LIMIT:
            failures.append(f"{name} fds grew by {f1 - f0} (> {FD_GROWTH_LIMIT})")
    if not alive:
        failures.append("the frontend died")
    if code != 0:
        failures.append(f"the frontend exited {code} on SIGTERM")
    if soak.unexpected:
        failures.append(f"{len(soak.unexpected)} calls ended in a way their kind does not allow: "
                        f"{collections.Counter(soak.unexpected).most_common(5)}")
    lines.append("")
    lines.append(f"bounds: RSS growth <= {RSS_GROWTH_LIMIT_MB} MiB, fd growth <= {FD_GROWTH_LIMIT} per process")
    lines.append("crashes: 0" if not failures else "FAILED:\n  " + "\n  ".join(failures))
    report = "\n".join(lines) + "\n"
    sys.stdout.write(report)
    if a.out:
        with open(a.out, "w") as f:
            f.write(report)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
