"""The `{{strategy}}` strategy plugin for Conclave, in Python (componentize-py).

Conclave runs `elect` for every election of a Lease whose `spec.strategy` is `{{strategy}}`, in a
sandbox: no clock, filesystem or network; everything the rule may use is in the request (see
wit/strategy.wit, and docs/strategy-authoring.md in the Conclave repository).

The starting rule below is Kubernetes' `OldestEmulationVersion`: lowest emulation version, then
lowest binary version, then oldest creation time, then name. Change it to yours, and update
vectors/{{name}}.json to match.

Candidates arrive as columns (conclave:strategy@0.4.0): element `i` of every list in
`request.candidates` belongs to candidate `i`, candidates are sorted by name, and `elect` answers
with the winner's position. Versions arrive as orders (a lower order is a lower version);
`U32_MAX` is a version that does not parse, `I64_MIN` an unknown time.
"""

import wit_world
from wit_world import CandidateFields, ElectionRequest, PluginInfo, Reads
from wit_world.imports import log
from componentize_py_types import Err

U32_MAX = 0xFFFF_FFFF
I64_MIN = -(1 << 63)

STRATEGIES = ["{{strategy}}"]
DESCRIPTION = "lowest emulation version, then lowest binary version, then oldest creation time, then name"
VERSION = "0.1.0"


class WitWorld(wit_world.WitWorld):
    def info(self) -> PluginInfo:
        # Versions and times always arrive. To read more, e.g. a label:
        # Reads(CandidateFields(0), ["topology.kubernetes.io/zone"], [])
        # Every column read is copied into the plugin on every election: ask only for what the
        # rule uses.
        # The last field says whether the answer may depend on `request.now`. True is always safe:
        # the plugin is called again at every renewal of the Lease by its holder. This starting
        # rule compares nothing with `now`; once yours is final and does not either, say False
        # and those renewals call nothing.
        return PluginInfo(
            STRATEGIES, DESCRIPTION, VERSION, Reads(CandidateFields(0), [], [], True)
        )

    def elect(self, request: ElectionRequest) -> int | None:
        # Return the winner's position, or None for nobody. To fail the election (e.g. on invalid
        # settings), raise Err("what is wrong and how to fix it"); any other exception traps.
        if request.settings and request.settings.strip() not in ("", "null", "{}"):
            log.log(log.Level.DEBUG, "settings are ignored by this rule")
        columns = request.candidates
        best = None
        best_key = None
        for i, (emulation, binary, created) in enumerate(
            zip(columns.emulation_version, columns.binary_version, columns.creation_time)
        ):
            # A candidate whose versions do not parse is ineligible.
            if emulation == U32_MAX or binary == U32_MAX:
                continue
            # An unknown creation time ranks after every known one; the position breaks a full
            # tie (candidates are sorted by name).
            key = (emulation, binary, created == I64_MIN, created)
            if best_key is None or key < best_key:
                best, best_key = i, key
        return best
