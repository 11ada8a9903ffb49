#!/usr/bin/env bash
# Soak: one netrig server for SOAK_SECONDS (default 600) under SOAK_CLIENTS
# (default 6) concurrent clients: UDP streams both ways, TCP and UDP
# request/response, TCP tests and connection churn, some through netrig relays
# injecting loss, duplication, reordering, corruption and resets, and clients
# SIGKILLed mid-test. Prints tests run, faults injected and detected, the
# mismatches (must be 0), and the server's RSS and descriptors over time.
# Bounded: it stops by itself. Not part of the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

SOAK_SECONDS=${SOAK_SECONDS:-600} SOAK_CLIENTS=${SOAK_CLIENTS:-6} NETRIG=$NETRIG WORK=$WORK \
python3 - <<'PY'
import json, os, random, signal, socket, subprocess, sys, threading, time

BIN, WORK = os.environ["NETRIG"], os.environ["WORK"]
SECONDS, CLIENTS = int(os.environ["SOAK_SECONDS"]), int(os.environ["SOAK_CLIENTS"])

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def wait_listen(port):
    for _ in range(500):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close(); return
        except OSError:
            time.sleep(0.02)
    sys.exit(f"nothing listens on {port}")

procs = []
def start(args):
    p = subprocess.Popen([BIN] + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(p); return p

sport = free_port()
server = start(["serve", "--listen", f"127.0.0.1:{sport}", "-q", "--max-tests", "500"])
wait_listen(sport)

relays = {}
def relay(name, *faults):
    port = free_port()
    js, log = f"{WORK}/{name}.json", f"{WORK}/{name}.csv"
    p = start(["relay", "--listen", f"127.0.0.1:{port}", "--to", f"127.0.0.1:{sport}", "-q",
               "--json", js, "--log", log, *faults])
    wait_listen(port)
    relays[name] = (p, port, js, log)
    return port

udp_port = relay("udp", "--loss", "1%", "--dup", "0.5%", "--reorder", "0.5%", "--corrupt", "0.5%", "--seed", "11")
flip_port = relay("tcp_flip", "--corrupt", "0.00000003", "--seed", "12")
reset_port = relay("tcp_reset", "--reset-after", "1M", "--seed", "13")
rr_port = relay("rr_loss", "--loss", "2%", "--seed", "14")

lock = threading.Lock()
runs = {}          # kind -> count
failed = {}        # kind -> count of runs without a result file
detected = {k: 0 for k in ["udp lost", "udp duplicated", "udp reordered", "udp corrupt",
                           "tcp data errors", "tcp resets", "rr lost"]}
churn_bad = 0
kills = 0

def run_json(kind, args, env=None):
    js = f"{WORK}/{kind}-{threading.get_ident()}-{time.monotonic_ns()}.json"
    r = subprocess.run([BIN] + args + ["-q", "--json", js], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=120)
    with lock:
        runs[kind] = runs.get(kind, 0) + 1
    try:
        with open(js) as f:
            doc = json.load(f)
        os.unlink(js)
        return doc
    except (OSError, ValueError):
        with lock:
            failed[kind] = failed.get(kind, 0) + 1
        return None

def add(key, n):
    with lock:
        detected[key] += n

def job(i, rng):
    global churn_bad, kills
    k = i % 7
    if k in (0, 1):
        args = ["udp", f"127.0.0.1:{udp_port}", "-b", "20M", "-l", "1000", "-t", "2"]
        if k == 1:
            args.append("-R")
        d = run_json("udp", args)
        if d:
            t = d["result"]["totals"]
            add("udp lost", t["lost"]); add("udp duplicated", t["duplicates"])
            add("udp reordered", t["reordered"]); add("udp corrupt", t["corrupt"])
    elif k == 2:
        d = run_json("tcp through corruption", ["tcp", f"127.0.0.1:{flip_port}", "-n", "4M", "-P", "4", "--iterations", "2"])
        if d:
            add("tcp data errors", d["result"]["totals"]["data_errors"])
    elif k == 3:
        d = run_json("tcp through resets", ["tcp", f"127.0.0.1:{reset_port}", "-n", "2M", "-P", "2", "--iterations", "1"])
        if d:
            add("tcp resets", d["result"]["totals"]["net_errors"])
    elif k == 4:
        d = run_json("rr udp through loss", ["rr", f"127.0.0.1:{rr_port}", "--proto", "udp",
                                             "-n", "2000", "--warmup", "0", "--timeout", "50ms"])
        if d:
            r = d["result"]["runs"][0]
            add("rr lost", (r.get("lost_up") or 0) + (r.get("lost_down") or 0))
    elif k == 5:
        d = run_json("tcp churn", ["tcp", f"127.0.0.1:{sport}", "-n", "4K", "-P", "20", "--iterations", "10"])
        ok = d and d["result"]["totals"]["completed"] == 200
        if not ok:
            with lock:
                churn_bad += 1
        if d:
            d2 = run_json("rr tcp", ["rr", f"127.0.0.1:{sport}", "-n", "5000"])
    else:
        kind = rng.choice([["tcp", "-P", "4"], ["udp", "-b", "50M", "-t", "30"],
                           ["udp", "-R", "-b", "50M", "-t", "30"], ["rr", "-n", "100000000"]])
        p = subprocess.Popen([BIN, kind[0], f"127.0.0.1:{sport}", *kind[1:], "-q"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.1, 0.6))
        p.kill(); p.wait()
        with lock:
            kills += 1

deadline = time.monotonic() + SECONDS
def worker(w):
    rng = random.Random(w)
    i = w
    while time.monotonic() < deadline:
        job(i, rng)
        i += 1

def status(pid):
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd"))

samples = []
def monitor():
    t0 = time.monotonic()
    every = max(5, SECONDS // 20)
    while time.monotonic() < deadline + 5:
        if server.poll() is not None:
            return
        samples.append((time.monotonic() - t0, *status(server.pid)))
        time.sleep(every)

print(f"soak: {SECONDS} s, {CLIENTS} concurrent clients, server 127.0.0.1:{sport}", flush=True)
mon = threading.Thread(target=monitor, daemon=True); mon.start()
ws = [threading.Thread(target=worker, args=(w,)) for w in range(CLIENTS)]
for w in ws: w.start()
for w in ws: w.join()
time.sleep(2)  # let the server wind the last sessions down
final = status(server.pid) if server.poll() is None else (0, 0)
samples.append((time.monotonic() - (deadline - SECONDS), *final))

counts = {}
for name, (p, port, js, log) in relays.items():
    p.send_signal(signal.SIGINT); p.wait(timeout=30)
    with open(js) as f:
        counts[name] = json.load(f)["result"]

def both(c, *keys):
    return sum(c[d][k] for d in ("up", "down") for k in keys)

u = counts["udp"]
flipped_conns = set()
with open(relays["tcp_flip"][3]) as f:
    next(f)
    for line in f:
        c = line.rstrip("\n").split(",")
        if c[4] == "corrupted":
            flipped_conns.add(c[2])
injected = {
    "udp lost": both(u, "lost", "policed", "queue_dropped"),
    "udp duplicated": both(u, "duplicated"),
    "udp reordered": both(u, "reordered"),
    "udp corrupt": both(u, "corrupted"),
    "tcp data errors": len(flipped_conns),
    "tcp resets": both(counts["tcp_reset"], "resets"),
    "rr lost": both(counts["rr_loss"], "lost"),
}

print("\ntests run:")
for k in sorted(runs):
    print(f"  {k:<24} {runs[k]:>6}" + (f"   ({failed[k]} without a result)" if k in failed else ""))
print(f"  {'clients SIGKILLed':<24} {kills:>6}")
print(f"\n{'fault':<18} {'injected':>10} {'detected':>10} {'mismatch':>9}")
mismatches = 0
for k in injected:
    m = abs(injected[k] - detected[k])
    mismatches += m
    print(f"{k:<18} {injected[k]:>10} {detected[k]:>10} {m:>9}")
print(f"{'churn runs with errors':<39} {churn_bad:>10}")
mismatches += churn_bad + sum(failed.values())
print("\nserver over time:\n  t_s    RSS_KiB  fds")
for t, rss, fds in samples:
    print(f"  {t:5.0f} {rss:>9} {fds:>4}")
alive = server.poll() is None
print(f"\nserver alive: {alive}; mismatches: {mismatches}")
for p in procs:
    if p.poll() is None:
        p.kill()
sys.exit(0 if alive and mismatches == 0 else 1)
PY
