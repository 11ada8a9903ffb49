#!/usr/bin/env bash
# Soak: one netrig server for SOAK_SECONDS (default 600) under SOAK_CLIENTS
# (default 6) concurrent clients: UDP streams both ways, TCP and UDP
# request/response, TCP tests and connection churn, some through netrig relays
# injecting loss, duplication, reordering, corruption and resets, and clients
# SIGKILLed mid-test. Prints tests run, faults injected and detected, the
# mismatches (must be 0), and the server's RSS and descriptors over time.
# With SOAK_ATTACK=1 (the default) an attack mix runs alongside from other
# loopback addresses (127.0.0.2-9): trickled handshakes, silent sessions,
# requests built to allocate or send without bound, clients that stop
# reading, stray data connections, garbage, and idle connections and new-port
# datagrams at the relays. At the end the server's descriptors, threads and
# RSS must be back near where they were after warm-up. Legit probes (tcp,
# udp, rr, crr) run throughout; the attack starts after the first quarter, and
# the probes' median slowdown under attack must stay within 1.5x (issue 27).
# Bounded: it stops by itself. Not part of the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

SOAK_SECONDS=${SOAK_SECONDS:-600} SOAK_CLIENTS=${SOAK_CLIENTS:-6} SOAK_ATTACK=${SOAK_ATTACK:-1} \
NETRIG=$NETRIG WORK=$WORK \
python3 - <<'PY'
import json, os, random, signal, socket, subprocess, sys, threading, time

BIN, WORK = os.environ["NETRIG"], os.environ["WORK"]
SECONDS, CLIENTS = int(os.environ["SOAK_SECONDS"]), int(os.environ["SOAK_CLIENTS"])
ATTACK = os.environ["SOAK_ATTACK"] == "1"

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
# Legit clients all come from 127.0.0.1: room for them; attackers get the defaults.
server = start(["serve", "--listen", f"127.0.0.1:{sport}", "-q", "--max-tests", "500",
                "--max-tests-per-client", "64", "--max-conns-per-client", "1024",
                "--max-duration", "40s"])
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
# Attacked, and not counted in the fault tally.
attack_port = relay("attacked", "--max-flows", "64", "--idle-timeout", "10s")

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
    rss = threads = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            if line.startswith("Threads:"):
                threads = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd")), threads

# The attack mix: each attack is bounded in count and time, and every socket
# it opens is closed by the end of the soak.
NR = b"NR\x01\x00"
def frame(obj):
    p = json.dumps(obj).encode()
    return NR + len(p).to_bytes(4, "big") + p
HELLO = frame({"type": "hello", "protocol": 2, "software": "attack", "capabilities": []})
def udp_req(**edit):
    spec = {"kind": "udp", "reverse": False, "size": 1000, "gap_ps": 1000000000, "duration_ms": 1000,
            "pacing": "sleep", "catch_up": False, "verify": True, "interval_ms": 100, "hist_bin_ns": 50000,
            "hist_bins": 100, "offset_comp_ns": 0, "media": None, "profile": None, "precompute": False,
            "burst": None, "auth_datagrams": False}
    spec.update(edit)
    return frame({"type": "test_request", "test": spec})
def tcp_req(**edit):
    spec = {"kind": "tcp", "pattern": "pull", "transfer": 1 << 20, "push_bytes": 0, "pull_bytes": 0,
            "verify": "data", "connections": 1, "burst": None}
    spec.update(edit)
    return frame({"type": "test_request", "test": spec})
def step(at, rate, size):
    return {"at_ns": at, "rate_bps": rate, "size": size, "hold": False}
HOSTILE = [
    udp_req(hist_bins=2**32 - 1),
    udp_req(profile={"steps": [step(0, 1000, 100), step(500000000, 1000, 2**32 - 1)]}),
    udp_req(profile={"steps": []}),
    udp_req(profile={"steps": [step(0, 1000, 100), step(3600 * 10**9, 1000, 100)]}),
    tcp_req(burst={"size": 1, "period_ms": 1}),
    tcp_req(transfer=2000000, burst={"size": 1000000, "period_ms": 2**62}),
    frame({"type": "test_request", "test": {"kind": "rr", "proto": "udp", "size": 32, "reply": 65000,
                                             "iterations": 10**9, "nagle": False, "until_stopped": True}}),
    b"GET / HTTP/1.0\r\n\r\n",
    os.urandom(200),
]
attacks = {k: 0 for k in ["trickle", "silent", "hostile", "stop-reading", "stray data", "relay idle", "relay flows"]}
attack_sockets = []

def conn_from(src, port, timeout=5):
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    return s

def attack(a_deadline):
    rng = random.Random(99)
    n = 0
    while time.monotonic() < a_deadline:
        src = f"127.0.0.{2 + n % 8}"
        kind = n % 7
        n += 1
        try:
            if kind == 0:     # a handshake one byte at a time
                s = conn_from(src, sport)
                for b in HELLO[:10]:
                    s.send(bytes([b])); time.sleep(0.3)
                s.close(); attacks["trickle"] += 1
            elif kind == 1:   # ask for a test, then say nothing (held until the next round)
                s = conn_from(src, sport)
                s.sendall(HELLO + tcp_req(transfer=10**9)); attack_sockets.append(s)
                if len(attack_sockets) > 40:
                    attack_sockets.pop(0).close()
                attacks["silent"] += 1
            elif kind == 2:   # requests that would crash, allocate or send without bound
                for m in HOSTILE:
                    s = conn_from(src, sport)
                    s.sendall(HELLO + m)
                    try:
                        s.recv(65536)
                    except OSError:
                        pass
                    s.close()
                attacks["hostile"] += 1
            elif kind == 3:   # rr with 16 MB replies, never read
                s = conn_from(src, sport)
                s.sendall(HELLO + frame({"type": "test_request", "test": {"kind": "rr", "proto": "tcp",
                          "size": 1, "reply": 16 << 20, "iterations": 100, "nagle": False,
                          "until_stopped": False}}) + b"\x00" * 4)
                attack_sockets.append(s); attacks["stop-reading"] += 1
            elif kind == 4:   # a data connection for a session it guessed
                s = conn_from(src, sport)
                s.sendall(frame({"type": "data_hello", "session": str(__import__("uuid").uuid4()),
                                 "connection": str(__import__("uuid").uuid4()), "buffer": 65536}))
                try:
                    s.recv(4096)
                except OSError:
                    pass
                s.close(); attacks["stray data"] += 1
            elif kind == 5:   # idle connections at a relay
                for _ in range(20):
                    attack_sockets.append(conn_from(src, attack_port))
                while len(attack_sockets) > 120:
                    attack_sockets.pop(0).close()
                attacks["relay idle"] += 1
            else:             # one-byte datagrams from new ports at a relay
                for _ in range(50):
                    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                    u.bind((src, 0)); u.sendto(b"x", ("127.0.0.1", attack_port)); u.close()
                attacks["relay flows"] += 1
        except OSError:
            pass
        time.sleep(rng.uniform(0.05, 0.3))
    for s in attack_sockets:
        s.close()

# Legit probes, one of each kind in turn from 127.0.0.1 through the whole
# soak: the first quarter runs without the attack mix (those probes are the
# baseline: the same legit clients, the same machine), the rest with it. A
# probe's cost is its wall time; for UDP at full rate, time per byte received.
# Slowdown = median cost under attack / median cost before it.
PROBES = {
    "tcp": ["tcp", f"127.0.0.1:{sport}", "-n", "256M", "-P", "2", "--iterations", "1"],
    "udp": ["udp", f"127.0.0.1:{sport}", "-b", "2G", "-l", "1400", "-t", "1"],
    "rr": ["rr", f"127.0.0.1:{sport}", "-n", "2000"],
    "crr": ["crr", f"127.0.0.1:{sport}", "-n", "300", "-P", "2"],
}
probe_cost = {ph: {k: [] for k in PROBES} for ph in ("calm", "attack")}
probe_failed = {k: 0 for k in PROBES}
# Every probe's (start s, phase, kind, wall s, inner s): inner is what the run
# measured itself (rr: round trips x mean; crr: its duration), so a step in
# the wall time shows as inside the run or around it (setup, teardown).
probe_log = []
attack_on = threading.Event()

def timed_run(argv, limit):
    """Runs argv, killed after `limit` s; returns its exit code and wall time.
    Waits in one blocking waitpid: subprocess.run(timeout=...) polls the child
    with sleeps that double up to 50 ms, which rounded every probe's wall time
    up to 63 ms + k x 50 ms (issue 27's "50 ms step" in rr and crr)."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    killer = threading.Timer(limit, p.kill)
    killer.start()
    try:
        rc = p.wait()
    finally:
        killer.cancel()
    return rc, time.monotonic() - t0

def prober():
    n = 0
    while time.monotonic() < deadline:
        for kind, args in PROBES.items():
            phase = "attack" if attack_on.is_set() else "calm"
            js = f"{WORK}/probe-{n}.json"
            n += 1
            t0 = time.monotonic()
            try:
                rc, wall = timed_run([BIN] + args + ["-q", "--json", js], 120)
                with open(js) as f:
                    doc = json.load(f)
                os.unlink(js)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                probe_failed[kind] += 1
                continue
            if rc != 0:
                probe_failed[kind] += 1
                continue
            inner = None
            if kind == "udp":
                got = doc["result"]["totals"]["bytes"]
                cost = 1e9 / got if got else float("inf")
            else:
                cost = wall
                res = doc["result"]
                if kind == "crr":
                    inner = res.get("duration_secs")
                elif kind == "rr":
                    lat = (res["runs"][0] if "runs" in res else res).get("latency") or {}
                    if lat.get("mean_us") is not None:
                        inner = lat["count"] * lat["mean_us"] / 1e6
            probe_cost[phase][kind].append(cost)
            probe_log.append((t0 - deadline + SECONDS, phase, kind, wall, inner))

def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None

def attack_later(a_deadline):
    # The calm quarter first: the probes' baseline.
    time.sleep(max(0.0, (a_deadline - time.monotonic()) / 4))
    attack_on.set()
    attack(a_deadline)

samples = []
def monitor():
    t0 = time.monotonic()
    every = max(5, SECONDS // 20)
    while time.monotonic() < deadline + 5:
        if server.poll() is not None:
            return
        samples.append((time.monotonic() - t0, *status(server.pid)))
        time.sleep(every)

print(f"soak: {SECONDS} s, {CLIENTS} concurrent clients, server 127.0.0.1:{sport}"
      + (", attack mix from 127.0.0.2-9" if ATTACK else ""), flush=True)
# The probe timer's own error, so a step in the probes' times can be told
# from one in how they are taken: a 70 ms child should measure about 0.07 s.
_, t70 = timed_run(["sleep", "0.07"], 10)
print(f"probe timer: a 70 ms child measured {t70:.3f} s", flush=True)
# Warm up every kind of legit test once, so lazily made state is in the baseline.
for w in range(7):
    job(w, random.Random(w))
time.sleep(2)
baseline = status(server.pid)
deadline = time.monotonic() + SECONDS
mon = threading.Thread(target=monitor, daemon=True); mon.start()
atk = threading.Thread(target=attack_later, args=(deadline,))
if ATTACK:
    atk.start()
prb = threading.Thread(target=prober)
prb.start()
ws = [threading.Thread(target=worker, args=(w,)) for w in range(CLIENTS)]
for w in ws: w.start()
for w in ws: w.join()
if ATTACK:
    atk.join()
prb.join()
# Let the server wind the last sessions down (stalled ones end by their deadline).
settle = time.monotonic() + 50
while time.monotonic() < settle and server.poll() is None:
    rss, fds, threads = status(server.pid)
    if fds <= baseline[1] and threads <= baseline[2]:
        break
    time.sleep(0.5)
final = status(server.pid) if server.poll() is None else (0, 0, 0)
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
if ATTACK:
    print("\nattacks made: " + ", ".join(f"{k} {v}" for k, v in attacks.items()))
    a = counts["attacked"]
    print(f"attacked relay: {a['tcp_connections']} connections, {a['udp_flows']} flows, "
          f"{a['tcp_refused']} connections and {a['udp_refused']} datagrams refused, "
          f"{a['idle_closed']} closed idle")
print("\nserver over time:\n  t_s    RSS_KiB  fds threads")
print(f"  base {baseline[0]:>9} {baseline[1]:>4} {baseline[2]:>7}")
for t, rss, fds, threads in samples:
    print(f"  {t:5.0f} {rss:>9} {fds:>4} {threads:>7}")
print("\nlegit probes (median cost; udp: s per GB received at 2 Gbit/s offered):")
print(f"  {'kind':<5} {'calm':>9} {'attack':>9} {'slowdown':>9} {'runs':>6} {'failed':>6}")
slow_ok = True
for k in PROBES:
    c, a = median(probe_cost["calm"][k]), median(probe_cost["attack"][k])
    ratio = a / c if (a is not None and c) else None
    if ratio is not None and ratio > 1.5:
        slow_ok = False
    runs_k = len(probe_cost["calm"][k]) + len(probe_cost["attack"][k])
    fmt = lambda x: f"{x:9.3f}" if x is not None else f"{'-':>9}"
    print(f"  {k:<5} {fmt(c)} {fmt(a)} {fmt(ratio)} {runs_k:>6} {probe_failed[k]:>6}")
slow_ok = slow_ok and sum(probe_failed.values()) == 0
if os.environ.get("SOAK_PROBE_LOG"):
    with open(os.environ["SOAK_PROBE_LOG"], "w") as f:
        f.write("t_s,phase,kind,wall_s,inner_s\n")
        for t, ph, k, w, i in probe_log:
            f.write(f"{t:.3f},{ph},{k},{w:.4f},{'' if i is None else f'{i:.4f}'}\n")
    print(f"probe log: {os.environ['SOAK_PROBE_LOG']}")
if ATTACK:
    print(f"legit slowdown under attack <= 1.5x and no probe failed: {slow_ok}")
alive = server.poll() is None
leaked = final[1] > baseline[1] or final[2] > baseline[2] or final[0] > baseline[0] + 32 * 1024
print(f"\nserver alive: {alive}; mismatches: {mismatches}; "
      f"back to baseline (fds, threads, RSS within 32 MiB): {not leaked}")
for p in procs:
    if p.poll() is None:
        p.kill()
sys.exit(0 if alive and mismatches == 0 and not leaked and (slow_ok or not ATTACK) else 1)
PY
