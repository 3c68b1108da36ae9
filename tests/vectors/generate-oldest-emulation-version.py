#!/usr/bin/env python3
"""Writes oldest-emulation-version.json: test vectors for the OldestEmulationVersion strategy.

Run from the repository root: python3 tests/vectors/generate-oldest-emulation-version.py
Each expected leader is written by hand from the rule (spec §4 plus the name tie-break); the large
cases are built so that the winner is unambiguous.
"""
import hashlib
import json
import random

NOW = "2026-06-01T12:00:00Z"
NS = "kube-system"
LEASE = "kube-scheduler"
OEV = "OldestEmulationVersion"


def ts(second):
    """A creationTimestamp `second` seconds after 2026-01-01T00:00:00Z."""
    minutes, s = divmod(second, 60)
    hours, m = divmod(minutes, 60)
    days, h = divmod(hours, 24)
    return f"2026-01-{1 + days:02d}T{h:02d}:{m:02d}:{s:02d}Z"


def cand(name, binary, emulation, created=0, strategy=OEV, labels=None):
    """A LeaseCandidate as `kubectl get -o json` prints it; `emulation=None` omits the field."""
    spec = {
        "binaryVersion": binary,
        "leaseName": LEASE,
        "renewTime": "2026-06-01T11:59:58.000000Z",
        "pingTime": "2026-06-01T11:59:57.500000Z",
        "strategy": strategy,
    }
    if emulation is not None:
        spec["emulationVersion"] = emulation
    metadata = {
        "name": name,
        "namespace": NS,
        "resourceVersion": str(1000 + sum(map(ord, name))),
        "uid": f"00000000-0000-4000-8000-{hashlib.sha256(name.encode()).hexdigest()[:12]}",
    }
    if created is not None:
        metadata["creationTimestamp"] = ts(created)
    if labels:
        metadata["labels"] = labels
    return {
        "apiVersion": "coordination.k8s.io/v1beta1",
        "kind": "LeaseCandidate",
        "metadata": metadata,
        "spec": spec,
    }


def lease(holder, preferred=None, renew="2026-06-01T11:59:55.000000Z", duration=15):
    spec = {
        "holderIdentity": holder,
        "leaseDurationSeconds": duration,
        "renewTime": renew,
        "acquireTime": "2026-06-01T10:00:00.000000Z",
        "leaseTransitions": 3,
        "strategy": OEV,
    }
    if preferred:
        spec["preferredHolder"] = preferred
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": LEASE, "namespace": NS, "resourceVersion": "4242",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": spec,
    }


def case(name, candidates, leader, lease_obj=None, **extra):
    c = {"name": name, "now": NOW, "lease": lease_obj, "candidates": candidates,
         "expect": {"leader": leader}}
    c.update(extra)
    return c


upstream = [
    cand("baz1", "1.20.0", "1.20.0"),
    cand("baz2", "1.20.0", "1.19.0"),
    cand("baz3", "1.19.0", "1.19.0"),
    cand("baz4", "1.20.0", "1.19.0"),
]

cases = [
    case("upstream integration example elects baz3", upstream, "baz3"),
    case("upstream example in reverse order still elects baz3", list(reversed(upstream)), "baz3"),
    case("a single candidate is elected", [cand("only", "1.33.0", "1.33.0")], "only"),
    case("no candidates elects nobody", [], None),
    case("lowest emulation version wins over lower binary version",
         [cand("a", "1.31.0", "1.31.0"), cand("b", "1.33.0", "1.30.0"), cand("c", "1.30.0", "1.30.1")], "b"),
    case("equal emulation: lowest binary version wins",
         [cand("a", "1.32.0", "1.31.0"), cand("b", "1.31.2", "1.31.0"), cand("c", "1.31.10", "1.31.0")], "b"),
    case("equal versions: oldest creationTimestamp wins",
         [cand("a", "1.31.0", "1.31.0", created=300), cand("b", "1.31.0", "1.31.0", created=100),
          cand("c", "1.31.0", "1.31.0", created=200)], "b"),
    case("full tie broken by name",
         [cand("node-c", "1.31.0", "1.31.0", created=5), cand("node-a", "1.31.0", "1.31.0", created=5),
          cand("node-b", "1.31.0", "1.31.0", created=5)], "node-a"),
    case("full tie broken by name, other order",
         [cand("node-b", "1.31.0", "1.31.0", created=5), cand("node-c", "1.31.0", "1.31.0", created=5),
          cand("node-a", "1.31.0", "1.31.0", created=5)], "node-a"),
    case("unknown creationTimestamp ranks after a known one",
         [cand("a", "1.31.0", "1.31.0", created=None), cand("b", "1.31.0", "1.31.0", created=9000)], "b"),
    case("unparseable binary version is ineligible",
         [cand("old-but-broken", "one.thirty", "1.29.0"), cand("ok", "1.31.0", "1.31.0")], "ok"),
    case("unparseable emulation version is ineligible",
         [cand("broken", "1.31.0", "1.29.x"), cand("ok", "1.31.0", "1.31.0")], "ok"),
    case("missing emulationVersion is ineligible",
         [cand("no-emulation", "1.29.0", None), cand("ok", "1.31.0", "1.31.0")], "ok"),
    case("empty binaryVersion is ineligible",
         [cand("no-binary", "", "1.29.0"), cand("ok", "1.31.0", "1.31.0")], "ok"),
    case("four-part version is ineligible",
         [cand("four-part", "1.29.0.1", "1.29.0"), cand("ok", "1.31.0", "1.31.0")], "ok"),
    case("all candidates ineligible elects nobody",
         [cand("x", "garbage", "1.30.0"), cand("y", "1.30.0", None), cand("z", "", "")], None),
    case("pre-release emulation version sorts below its release",
         [cand("release", "1.31.0", "1.31.0", created=1), cand("rc", "1.31.0", "1.31.0-rc.1", created=50)], "rc"),
    case("numeric pre-release identifiers compare numerically",
         [cand("alpha10", "1.31.0", "1.31.0-alpha.10", created=1), cand("alpha2", "1.31.0", "1.31.0-alpha.2", created=50)],
         "alpha2"),
    case("alphanumeric pre-release identifiers compare as text (alpha < beta)",
         [cand("beta", "1.31.0-beta.0", "1.31.0-beta.0", created=1), cand("alpha", "1.31.0-alpha.3", "1.31.0-alpha.3", created=50)],
         "alpha"),
    case("pre-release binary version sorts below release binary at equal emulation",
         [cand("release", "1.31.0", "1.30.0", created=1), cand("pre", "1.31.0-rc.0", "1.30.0", created=50)], "pre"),
    case("build metadata is ignored, so creation time decides",
         [cand("build-aaa", "1.31.0+aaa", "1.31.0+aaa", created=60), cand("build-zzz", "1.31.0+zzz", "1.31.0+zzz", created=10)],
         "build-zzz"),
    case("versions compare numerically, not as text (1.9 < 1.10)",
         [cand("v1-10", "1.10.0", "1.10.0"), cand("v1-9", "1.9.0", "1.9.0")], "v1-9"),
    case("major version dominates",
         [cand("two", "2.0.0", "2.0.0"), cand("one", "1.99.0", "1.99.0")], "one"),
    case("tolerant parsing accepts a v prefix and short forms, as the controller does",
         [cand("short", "v1.29", "v1.29", created=100), cand("full", "1.30.0", "1.30.0", created=1)], "short"),
    case("held Lease: the strategy still names the best candidate (the host decides on pre-emption)",
         [cand("current", "1.32.0", "1.32.0", created=1), cand("older", "1.31.0", "1.31.0", created=50)], "older",
         lease_obj=lease("current")),
    case("expired Lease with a preferred holder: the rule alone decides",
         [cand("a", "1.31.0", "1.31.0", created=20), cand("b", "1.31.0", "1.31.0", created=10)], "b",
         lease_obj=lease("a", preferred="a", renew="2026-06-01T11:00:00.000000Z")),
    case("alias MinimumCompatibilityVersion elects the same way",
         [cand("a", "1.31.0", "1.31.0", strategy="MinimumCompatibilityVersion"),
          cand("b", "1.31.0", "1.30.0", strategy="MinimumCompatibilityVersion")], "b",
         strategy="MinimumCompatibilityVersion"),
    case("labels and settings do not affect the rule",
         [cand("a", "1.31.0", "1.31.0", labels={"tier": "gold"}), cand("b", "1.30.0", "1.30.0", labels={"tier": "bronze"})],
         "b", settings={"prefer": "gold"}),
]

# 150 candidates: one unique oldest emulation version hidden in the middle.
rng = random.Random(4355)
big = []
for i in range(150):
    minor = rng.choice([31, 32, 33])
    big.append(cand(f"replica-{i:03d}", f"1.{minor}.{rng.randrange(0, 8)}", f"1.{minor}.0", created=rng.randrange(0, 86400)))
big[97] = cand("replica-097", "1.33.0", "1.30.0", created=86000)
cases.append(case("150 candidates: the single oldest emulation version wins", big, "replica-097"))

# 120 candidates: 12 tie on versions and creation time; the smallest name wins in any order.
tied = []
for i in range(108):
    tied.append(cand(f"member-{i:03d}", "1.33.1", "1.33.0", created=rng.randrange(0, 500)))
for suffix in "mdkxqbztfhwp":
    tied.append(cand(f"tied-{suffix}", "1.33.0", "1.32.0", created=42))
for order in range(2):
    rng.shuffle(tied)
    cases.append(case(f"120 candidates with a 12-way full tie, shuffle {order + 1}: smallest name wins",
                      list(tied), "tied-b"))

vectors = {"strategy": OEV, "cases": cases}
with open("tests/vectors/oldest-emulation-version.json", "w") as f:
    json.dump(vectors, f, indent=1)
    f.write("\n")
print(f"{len(cases)} cases")
