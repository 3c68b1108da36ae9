#!/usr/bin/env python3
"""Writes priority.json, least-disruption.json and zone-affinity.json: test vectors for the beta
strategy plugins conclave.dev/priority, conclave.dev/least-disruption and conclave.dev/zone-affinity.

Run from the repository root: python3 tests/vectors/generate-beta-strategies.py
Each expected leader is written by hand from the rule in the plugin's doc comment (and issue 8);
the large cases are built so that the winner is unambiguous. `"expect": {"error": true}` means
`elect` must return an error; `"message"` is a substring the error must contain.
"""
import hashlib
import json
import random

NOW = "2026-06-01T12:00:00Z"
NS = "kube-system"
LEASE = "kube-scheduler"
PRIORITY = "coordination.conclave.dev/priority"
ZONE = "topology.kubernetes.io/zone"


def ts(second):
    """A creationTimestamp `second` seconds after 2026-01-01T00:00:00Z."""
    minutes, s = divmod(second, 60)
    hours, m = divmod(minutes, 60)
    days, h = divmod(hours, 24)
    return f"2026-01-{1 + days:02d}T{h:02d}:{m:02d}:{s:02d}Z"


def cand(strategy, name, binary, emulation, created=0, labels=None, annotations=None):
    """A LeaseCandidate as `kubectl get -o json` prints it."""
    metadata = {
        "name": name,
        "namespace": NS,
        "resourceVersion": str(1000 + sum(map(ord, name))),
        "uid": f"00000000-0000-4000-8000-{hashlib.sha256(name.encode()).hexdigest()[:12]}",
        "creationTimestamp": ts(created),
    }
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "coordination.k8s.io/v1beta1",
        "kind": "LeaseCandidate",
        "metadata": metadata,
        "spec": {
            "binaryVersion": binary,
            "emulationVersion": emulation,
            "leaseName": LEASE,
            "renewTime": "2026-06-01T11:59:58.000000Z",
            "pingTime": "2026-06-01T11:59:57.500000Z",
            "strategy": strategy,
        },
    }


def lease(strategy, holder, preferred=None, renew="2026-06-01T11:59:55.000000Z", duration=15):
    """A Lease; with the default renew time it is live at NOW, with an old one it is expired."""
    spec = {
        "holderIdentity": holder,
        "leaseDurationSeconds": duration,
        "renewTime": renew,
        "acquireTime": "2026-06-01T10:00:00.000000Z",
        "leaseTransitions": 3,
        "strategy": strategy,
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


def error_case(name, candidates, message, **extra):
    c = {"name": name, "now": NOW, "lease": None, "candidates": candidates,
         "expect": {"error": True, "message": message}}
    c.update(extra)
    return c


def write(path, strategy, cases, settings=None):
    vectors = {"strategy": strategy}
    if settings is not None:
        vectors["settings"] = settings
    vectors["cases"] = cases
    with open(path, "w") as f:
        json.dump(vectors, f, indent=1)
        f.write("\n")
    print(f"{path}: {len(cases)} cases")


# --- conclave.dev/priority -------------------------------------------------------------------
S = "conclave.dev/priority"


def p(name, binary, emulation, priority=None, created=0):
    return cand(S, name, binary, emulation, created,
                annotations=None if priority is None else {PRIORITY: priority})


rng = random.Random(20254355)
big = [p(f"replica-{i:03d}", f"1.3{rng.randrange(0, 4)}.0", "1.30.0",
         priority=str(rng.randrange(1, 50)) if i % 3 else None, created=rng.randrange(0, 86400))
       for i in range(120)]
big[71] = p("replica-071", "1.33.9", "1.33.0", priority="500", created=86000)
tied_big = [p(f"member-{i:03d}", "1.33.0", "1.33.0", priority="7", created=100 + i) for i in range(100)]
tied_big[64] = p("member-064", "1.33.0", "1.32.0", priority="7", created=9000)
rng.shuffle(tied_big)

priority_cases = [
    case("highest priority leads even with a newer version",
         [p("old", "1.30.0", "1.30.0", "1"), p("new", "1.33.0", "1.33.0", "10"), p("mid", "1.31.0", "1.31.0", "5")], "new"),
    case("a missing annotation counts as 0, so any valid priority beats it",
         [p("unannotated-oldest", "1.29.0", "1.29.0", None), p("one", "1.33.0", "1.33.0", "1")], "one"),
    case("no annotations at all: the OldestEmulationVersion rule decides (upstream example)",
         [p("baz1", "1.20.0", "1.20.0"), p("baz2", "1.20.0", "1.19.0"), p("baz3", "1.19.0", "1.19.0"),
          p("baz4", "1.20.0", "1.19.0")], "baz3"),
    case("a non-numeric priority counts as 0 and ties with a missing one",
         [p("words", "1.31.0", "1.31.0", "high"), p("missing", "1.30.0", "1.30.0", None)], "missing"),
    case("priority 0 is invalid (must be > 0) and counts as 0",
         [p("zero", "1.29.0", "1.29.0", "0"), p("one", "1.33.0", "1.33.0", "1")], "one"),
    case("a negative priority is invalid and counts as 0, not below 0",
         [p("negative", "1.29.0", "1.29.0", "-100"), p("missing", "1.30.0", "1.30.0", None)], "negative"),
    case("a priority past int32 is invalid and counts as 0",
         [p("overflow", "1.29.0", "1.29.0", "2147483648"), p("one", "1.33.0", "1.33.0", "1")], "one"),
    case("the largest int32 is valid and wins",
         [p("max", "1.33.0", "1.33.0", "2147483647"), p("big", "1.29.0", "1.29.0", "2147483646")], "max"),
    case("a signed value (+5) is invalid",
         [p("plus", "1.29.0", "1.29.0", "+5"), p("two", "1.33.0", "1.33.0", "2")], "two"),
    case("surrounding spaces make a value invalid",
         [p("spaced", "1.29.0", "1.29.0", " 9"), p("two", "1.33.0", "1.33.0", "2")], "two"),
    case("a decimal fraction is invalid",
         [p("fraction", "1.29.0", "1.29.0", "5.0"), p("two", "1.33.0", "1.33.0", "2")], "two"),
    case("leading zeros are decimal: 010 is 10 and beats 9",
         [p("ten", "1.33.0", "1.33.0", "010"), p("nine", "1.29.0", "1.29.0", "9")], "ten"),
    case("equal priority: lowest emulation version wins",
         [p("a", "1.30.0", "1.31.0", "5"), p("b", "1.32.0", "1.30.0", "5"), p("low", "1.20.0", "1.20.0", "4")], "b"),
    case("equal priority and emulation: lowest binary version wins",
         [p("a", "1.31.2", "1.31.0", "5"), p("b", "1.31.1", "1.31.0", "5")], "b"),
    case("equal priority and versions: oldest creation wins",
         [p("young", "1.31.0", "1.31.0", "5", created=500), p("old", "1.31.0", "1.31.0", "5", created=20)], "old"),
    case("full tie: name decides",
         [p("node-b", "1.31.0", "1.31.0", "5", created=20), p("node-a", "1.31.0", "1.31.0", "5", created=20)], "node-a"),
    case("a candidate whose versions do not parse is ineligible whatever its priority",
         [p("broken", "one.thirty", "1.30.0", "1000"), p("ok", "1.33.0", "1.33.0", None)], "ok"),
    case("every candidate ineligible: nobody",
         [p("x", "garbage", "1.30.0", "5"), p("y", "1.30.0", "", "9")], None),
    case("no candidates: nobody", [], None),
    case("held Lease: the strategy names the highest priority (the host decides how to pre-empt)",
         [p("holder", "1.30.0", "1.30.0", "1"), p("urgent", "1.33.0", "1.33.0", "2")], "urgent",
         lease_obj=lease(S, "holder")),
    case("120 candidates: the single priority 500 wins over lower priorities and older versions",
         big, "replica-071"),
    case("100 candidates with equal priority: the one oldest emulation version wins, in any order",
         tied_big, "member-064"),
]
write("tests/vectors/priority.json", S, priority_cases)

# --- conclave.dev/least-disruption -----------------------------------------------------------
S = "conclave.dev/least-disruption"


def d(name, binary, emulation, created=0):
    return cand(S, name, binary, emulation, created)


def held(holder, **kw):
    return lease(S, holder, **kw)


EXPIRED = "2026-06-01T11:00:00.000000Z"
many = [d(f"replica-{i:03d}", "1.33.1", "1.33.0", created=1000 + i) for i in range(100)]
many[42] = d("replica-042", "1.33.1", "1.33.0", created=99999)
many_upgrade = [dict(c) for c in many]
many_upgrade[77] = d("replica-077", "1.33.0", "1.33.0", created=5000)

ld_cases = [
    case("no Lease: the OldestEmulationVersion rule decides (upstream example)",
         [d("baz1", "1.20.0", "1.20.0"), d("baz2", "1.20.0", "1.19.0"), d("baz3", "1.19.0", "1.19.0"),
          d("baz4", "1.20.0", "1.19.0")], "baz3"),
    case("live holder with equal versions is kept although another candidate is older",
         [d("holder", "1.31.0", "1.31.0", created=900), d("older", "1.31.0", "1.31.0", created=10)], "holder",
         lease_obj=held("holder")),
    case("live holder with equal versions is kept although another name sorts first",
         [d("zz-holder", "1.31.0", "1.31.0", created=10), d("aa-other", "1.31.0", "1.31.0", created=10)], "zz-holder",
         lease_obj=held("zz-holder")),
    case("same candidates without a holder: the oldest one is elected",
         [d("holder", "1.31.0", "1.31.0", created=900), d("older", "1.31.0", "1.31.0", created=10)], "older"),
    case("a strictly lower binary version replaces the holder",
         [d("holder", "1.31.2", "1.31.0", created=10), d("patched-down", "1.31.1", "1.31.0", created=900)],
         "patched-down", lease_obj=held("holder")),
    case("a strictly lower emulation version replaces the holder (rollback)",
         [d("holder", "1.31.0", "1.31.0", created=10), d("rollback", "1.32.0", "1.30.0", created=900)],
         "rollback", lease_obj=held("holder")),
    case("a holder that is itself the best stays",
         [d("holder", "1.30.0", "1.30.0", created=900), d("newer", "1.31.0", "1.31.0", created=10)], "holder",
         lease_obj=held("holder")),
    case("a holder on a newer version is replaced by the older one",
         [d("holder", "1.32.0", "1.32.0", created=10), d("older", "1.31.0", "1.31.0", created=900)], "older",
         lease_obj=held("holder")),
    case("an expired Lease is not protected: the rule alone decides",
         [d("holder", "1.31.0", "1.31.0", created=900), d("older", "1.31.0", "1.31.0", created=10)], "older",
         lease_obj=held("holder", renew=EXPIRED)),
    case("a holder that is not among the candidates (gone or not answering) is not kept",
         [d("a", "1.31.0", "1.31.0", created=900), d("b", "1.31.0", "1.31.0", created=10)], "b",
         lease_obj=held("departed")),
    case("a holder whose versions do not parse is not eligible, so not kept",
         [d("holder", "1.31.x", "1.31.0", created=1), d("ok", "1.31.0", "1.31.0", created=900)], "ok",
         lease_obj=held("holder")),
    case("an empty holderIdentity is no holder",
         [d("young", "1.31.0", "1.31.0", created=900), d("old", "1.31.0", "1.31.0", created=10)], "old",
         lease_obj=held("")),
    case("a pre-release is strictly older than its release, so it replaces the holder",
         [d("holder", "1.31.0", "1.31.0", created=1), d("rc", "1.31.0", "1.31.0-rc.1", created=900)], "rc",
         lease_obj=held("holder")),
    case("build metadata does not make a version older: the holder stays",
         [d("holder", "1.31.0+b", "1.31.0+b", created=900), d("other", "1.31.0+a", "1.31.0+a", created=1)], "holder",
         lease_obj=held("holder")),
    case("tolerant parsing: v1.31 equals 1.31.0, so the holder stays",
         [d("holder", "v1.31", "v1.31", created=900), d("other", "1.31.0", "1.31.0", created=1)], "holder",
         lease_obj=held("holder")),
    case("a pending preferredHolder with equal versions does not pre-empt a live holder",
         [d("holder", "1.31.0", "1.31.0", created=900), d("preferred", "1.31.0", "1.31.0", created=1)], "holder",
         lease_obj=held("holder", preferred="preferred")),
    case("no candidates: nobody", [], None, lease_obj=held("holder")),
    case("every candidate ineligible: nobody",
         [d("x", "garbage", "1.30.0"), d("y", "1.30.0", "")], None, lease_obj=held("x")),
    case("100 equal candidates: the youngest live holder is kept",
         many, "replica-042", lease_obj=held("replica-042")),
    case("100 candidates, one on a strictly older binary: it replaces the holder",
         many_upgrade, "replica-077", lease_obj=held("replica-042")),
]
write("tests/vectors/least-disruption.json", S, ld_cases)

# --- conclave.dev/zone-affinity --------------------------------------------------------------
S = "conclave.dev/zone-affinity"
ZONES = {"zones": ["zone-a", "zone-b", "zone-c"]}


def z(name, zone, binary="1.31.0", emulation=None, created=0):
    return cand(S, name, binary, emulation or binary, created,
                labels=None if zone is None else {ZONE: zone, "app": "scheduler"})


spread = []
for i in range(120):
    zone = ["zone-b", "zone-c", "zone-d", None][i % 4]
    spread.append(z(f"replica-{i:03d}", zone, f"1.3{rng.randrange(0, 3)}.0", created=rng.randrange(0, 86400)))
spread[53] = z("replica-053", "zone-b", "1.33.0", created=86000)
spread[90] = z("replica-090", "zone-b", "1.30.0", "1.29.0", created=80000)
rng.shuffle(spread)

basic = [z("in-c", "zone-c", "1.29.0"), z("in-b", "zone-b", "1.30.0"), z("in-a", "zone-a", "1.33.0", created=900)]
za_cases = [
    case("the earliest listed zone leads over older versions elsewhere", basic, "in-a"),
    case("without candidates in the first zone, the second leads", basic[:2], "in-b"),
    case("an unlisted zone comes after every listed zone",
         [z("in-d", "zone-d", "1.20.0"), z("in-c", "zone-c", "1.33.0")], "in-c"),
    case("a candidate without the zone label comes after every listed zone",
         [z("unlabelled", None, "1.20.0"), z("in-c", "zone-c", "1.33.0")], "in-c"),
    case("unlisted and unlabelled candidates rank together by OldestEmulationVersion",
         [z("in-d", "zone-d", "1.31.0"), z("unlabelled", None, "1.30.0"), z("in-e", "zone-e", "1.32.0")], "unlabelled"),
    case("zone names are case-sensitive: Zone-A is not zone-a",
         [z("capital", "Zone-A", "1.29.0"), z("in-b", "zone-b", "1.33.0")], "in-b"),
    case("within a zone: lowest emulation version wins",
         [z("a1", "zone-a", "1.30.0", "1.31.0"), z("a2", "zone-a", "1.32.0", "1.30.0")], "a2"),
    case("within a zone: lowest binary version wins at equal emulation",
         [z("a1", "zone-a", "1.31.2", "1.31.0"), z("a2", "zone-a", "1.31.1", "1.31.0")], "a2"),
    case("within a zone: oldest creation wins at equal versions",
         [z("young", "zone-a", created=500), z("old", "zone-a", created=5)], "old"),
    case("within a zone: name breaks a full tie",
         [z("node-b", "zone-a", created=5), z("node-a", "zone-a", created=5)], "node-a"),
    case("an ineligible candidate (unparseable version) in the first zone is skipped",
         [z("broken", "zone-a", "1.31.x"), z("in-b", "zone-b", "1.33.0")], "in-b"),
    case("a reversed preference elects zone-c",
         basic, "in-c", settings={"zones": ["zone-c", "zone-b", "zone-a"]}),
    case("a one-zone list: that zone first, everyone else by OldestEmulationVersion",
         [z("in-a", "zone-a", "1.30.0"), z("in-b", "zone-b", "1.29.0"), z("in-c", "zone-c", "1.33.0")], "in-c",
         settings={"zones": ["zone-c"]}),
    case("no candidates with valid settings: nobody", [], None),
    case("120 candidates across zones b, c, d and none: the oldest version in zone-b wins",
         spread, "replica-090"),
    error_case("settings that are not an object are an error", basic, "must be a JSON object",
               settings=["zone-a", "zone-b"]),
    error_case("settings without zones are an error", basic, "\"zones\" is missing", settings={}),
    error_case("a misspelt settings key is an error", basic, "unknown settings key \"zone\"",
               settings={"zone": ["zone-a"]}),
    error_case("zones given as one string is an error", basic, "must be a list of zone names",
               settings={"zones": "zone-a"}),
    error_case("an empty zone list is an error", basic, "\"zones\" is empty", settings={"zones": []}),
    error_case("a zone that is not a string is an error", basic, "zones[1] must be a zone name",
               settings={"zones": ["zone-a", 7]}),
    error_case("an empty zone name is an error", basic, "zones[0] is an empty string",
               settings={"zones": ["", "zone-a"]}),
    error_case("a zone listed twice is an error", basic, "listed twice (zones[0] and zones[2])",
               settings={"zones": ["zone-a", "zone-b", "zone-a"]}),
    error_case("bad settings are an error even with no candidates", [], "\"zones\" is empty",
               settings={"zones": []}),
]
# Settings are given per case (not file-wide) so that one case can have none at all.
for c in za_cases:
    c.setdefault("settings", ZONES)
za_cases.append(error_case("missing settings are an error", basic, "no settings are configured"))
write("tests/vectors/zone-affinity.json", S, za_cases)
