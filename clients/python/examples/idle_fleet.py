"""What an idle fleet of Python Runners costs the coordinator: --participants Runners of one
job in this one process, each waiting in its long-poll of --wait-ms, no checkpoints opened.
After --warmup seconds it measures, for --duration seconds, the requests the coordinator
served (from its /metrics), the coordinator's CPU (from /proc, --coordinator-pid) and this
process's, and prints them. The same shape as `coordinator fleet --idle --jobs 1
--participants N --wait W`, for the Go Runner.

    python3 clients/python/examples/idle_fleet.py --url http://127.0.0.1:8080 \\
        --coordinator-pid $(pgrep -f 'coordinator serve') --participants 500 --wait-ms 30000
"""

import argparse
import os
import re
import resource
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import twophase  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def requests_served(url, token):
    req = urllib.request.Request(url + "/metrics")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    with urllib.request.urlopen(req, timeout=10) as resp:
        text = resp.read().decode()
    return sum(float(m) for m in re.findall(r"^coordinator_http_requests_total\{.*\} (\S+)$", text, re.M))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--token", default=os.environ.get("COORDINATOR_TOKEN"))
    ap.add_argument("--coordinator-pid", type=int, required=True)
    ap.add_argument("--participants", type=int, default=500)
    ap.add_argument("--wait-ms", type=int, default=30000)
    ap.add_argument("--warmup", type=float, default=5)
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--job", default="idle-python")
    args = ap.parse_args()

    coord = twophase.Coordinator(args.url, token=args.token)
    names = [f"p{i}" for i in range(args.participants)]
    coord.put_job(args.job, names)
    stop = threading.Event()
    runners = [twophase.Runner(coord, args.job, n, prepare=lambda c: [], commit=lambda c, x: None,
                               abort=lambda c, x: None, wait_ms=args.wait_ms) for n in names]
    threads = [threading.Thread(target=r.run, args=(stop,), daemon=True) for r in runners]
    for t in threads:
        t.start()
    while any(r.epoch == 0 for r in runners):
        time.sleep(0.1)
    time.sleep(args.warmup)
    r0, c0, s0, t0 = requests_served(args.url, args.token), cpu_seconds(args.coordinator_pid), cpu_seconds(os.getpid()), time.monotonic()
    time.sleep(args.duration)
    r1, c1, s1, t1 = requests_served(args.url, args.token), cpu_seconds(args.coordinator_pid), cpu_seconds(os.getpid()), time.monotonic()
    elapsed = t1 - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # The two /metrics reads are requests too: one is counted in the window.
    print(f"idle python fleet: {args.participants} runners of one job, wait {args.wait_ms} ms, {elapsed:.0f} s: "
          f"{(r1 - r0 - 1) / elapsed:.1f} requests/s served, coordinator {100 * (c1 - c0) / elapsed:.2f} % of a core, "
          f"fleet {100 * (s1 - s0) / elapsed:.2f} % of a core, fleet RSS max {rss:.0f} MiB, {threading.active_count()} threads")
    stop.set()
    for t in threads:
        t.join(10)


if __name__ == "__main__":
    main()
