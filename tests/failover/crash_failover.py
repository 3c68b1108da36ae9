#!/usr/bin/env python3
"""Crash failover as a new user would see it (docs/benchmarks.md, "The controller, against
kube-apiserver's built-in controller", run (a)). Usage: crash_failover.py CONCLAVE_BINARY [LEASE_SECONDS [ROUNDS]].

Crash failover as a new user would see it: a bare `conclave run --mode all` on a fresh
`conclave emulator`, three `conclave candidate --lease-duration D --renew-deadline R
--retry-period P`, SIGKILL of the leader once the others are stale; prints when the next holder
was written, after the kill and after the Lease's expiry."""
import datetime, json, os, re, shutil, signal, subprocess, sys, tempfile, time, urllib.request

BIN = sys.argv[1]
DUR = int(sys.argv[2]) if len(sys.argv) > 2 else 5
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
RD = {2: "1500ms", 5: "3s", 15: "10s"}.get(DUR, f"{DUR*2//3}s")
RP = {2: "500ms", 5: "1s", 15: "2s"}.get(DUR, "1s")
d = tempfile.mkdtemp()
kc = os.path.join(d, "kubeconfig")
procs = []
def start(args, log):
    p = subprocess.Popen([BIN] + args, stdout=open(os.path.join(d, log), "w"), stderr=subprocess.STDOUT)
    procs.append(p); return p
try:
    start(["emulator", "--kubeconfig-out", kc], "emulator.log")
    while not os.path.exists(kc): time.sleep(0.05)
    time.sleep(0.3)
    # The emulator serves plain HTTP on loopback without authentication.
    server = re.search(r"server: (http://\S+)", open(kc).read()).group(1)
    def lease():
        url = server + "/apis/coordination.k8s.io/v1/namespaces/default/leases/fo"
        try:
            return json.load(urllib.request.urlopen(url))["spec"]
        except Exception:
            return None
    ctl = subprocess.Popen([BIN, "run", "--mode", "all", "--kubeconfig", kc], stdout=open(os.path.join(d, "run.log"), "w"), stderr=subprocess.STDOUT)
    procs.append(ctl)
    cands = {}
    def cand(name, emu):
        cands[name] = start(["candidate", "--kubeconfig", kc, "--lease", "fo", "--identity", name,
            "--binary-version", "1.37.0", "--emulation-version", emu,
            "--lease-duration", f"{DUR}s", "--renew-deadline", RD, "--retry-period", RP], name + ".log")
    versions = ["1.33.0", "1.34.0", "1.35.0", "1.36.0", "1.37.0"]
    gen = 0
    for n in range(3):
        cand(f"c{gen}", versions[n]); gen += 1
    results = []
    for r in range(ROUNDS):
        t0 = time.time()
        while True:
            s = lease()
            if s and s.get("holderIdentity") in cands: break
            time.sleep(0.05)
        holder = s["holderIdentity"]
        time.sleep(7)  # the others go stale (ack window 5 s)
        s = lease(); holder = s["holderIdentity"]
        cands[holder].send_signal(signal.SIGKILL); killed = time.time()
        time.sleep(0.1)
        renew = lease().get("renewTime")
        expiry = datetime.datetime.fromisoformat(renew.replace("Z", "+00:00")).timestamp() + DUR
        while True:
            s = lease()
            if s and s.get("holderIdentity") not in (None, "", holder): break
            time.sleep(0.01)
        written = time.time()
        results.append((DUR, holder, s["holderIdentity"], written - killed, written - expiry))
        print(f"lease {DUR}s: killed {holder}, next holder {s['holderIdentity']} written {written-killed:.2f} s after the kill, {written-expiry:+.2f} s after the Lease's expiry", flush=True)
        del cands[holder]
        # replace the killed replica with a worse one, as a restart would
        cand(f"c{gen}", "1.37.0"); gen += 1
finally:
    for p in procs:
        try: p.send_signal(signal.SIGKILL)
        except Exception: pass
    shutil.rmtree(d, ignore_errors=True)
