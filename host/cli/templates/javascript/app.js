// The `{{strategy}}` strategy plugin for Conclave, in JavaScript (componentize-js).
//
// Conclave runs `elect` for every election of a Lease whose `spec.strategy` is `{{strategy}}`, in a
// sandbox: no clock, filesystem or network; everything the rule may use is in the request (see
// wit/strategy.wit, and docs/strategy-authoring.md in the Conclave repository).
//
// The starting rule below is Kubernetes' `OldestEmulationVersion`: lowest emulation version, then
// lowest binary version, then oldest creation time, then name. Change it to yours, and update
// vectors/{{name}}.json to match.
//
// Candidates arrive as columns (conclave:strategy@0.4.0): element `i` of every list in
// `request.candidates` belongs to candidate `i`, candidates are sorted by name, and `elect` answers
// with the winner's position. Versions arrive as orders (a lower order is a lower version);
// `U32_MAX` is a version that does not parse. Times are BigInts (s64, microseconds), `I64_MIN` an
// unknown time. Lists of integers arrive as typed arrays (Uint32Array, BigInt64Array).

import { log } from "conclave:strategy/log@0.4.0";

const U32_MAX = 0xffffffff;
const I64_MIN = -(1n << 63n);

const STRATEGIES = ["{{strategy}}"];
const DESCRIPTION =
  "lowest emulation version, then lowest binary version, then oldest creation time, then name";
const VERSION = "0.1.0";

export function info() {
  return {
    strategies: STRATEGIES,
    description: DESCRIPTION,
    version: VERSION,
    // Versions and times always arrive. To read more, e.g. a label:
    // { fields: {}, labelKeys: ["topology.kubernetes.io/zone"], annotationKeys: [] }
    // (fields: { name, strategy, versionText, labels, annotations } as booleans). Every column
    // read is copied into the plugin on every election: ask only for what the rule uses.
    // `now` says whether the answer may depend on `request.now`. true is always safe: the plugin
    // is called again at every renewal of the Lease by its holder. This starting rule compares
    // nothing with `now`; once yours is final and does not either, say false and those renewals
    // call nothing.
    reads: { fields: {}, labelKeys: [], annotationKeys: [], now: true },
  };
}

// Returns the winner's position, or undefined for nobody. To fail the election (e.g. on invalid
// settings), throw a string: `throw "what is wrong and how to fix it"` (a thrown Error object is
// not a string and traps instead).
export function elect(request) {
  const settings = request.settings.trim();
  if (settings !== "" && settings !== "null" && settings !== "{}") {
    log("debug", "settings are ignored by this rule");
  }
  const { emulationVersion, binaryVersion, creationTime } = request.candidates;
  let best;
  for (let i = 0; i < emulationVersion.length; i++) {
    const emulation = emulationVersion[i];
    const binary = binaryVersion[i];
    // A candidate whose versions do not parse is ineligible.
    if (emulation === U32_MAX || binary === U32_MAX) continue;
    if (best === undefined || older(request.candidates, i, best)) best = i;
  }
  return best;
}

// Whether candidate `a` ranks before candidate `b`; on a full tie the earlier position (name) wins,
// so a later one never replaces it.
function older({ emulationVersion, binaryVersion, creationTime }, a, b) {
  if (emulationVersion[a] !== emulationVersion[b]) return emulationVersion[a] < emulationVersion[b];
  if (binaryVersion[a] !== binaryVersion[b]) return binaryVersion[a] < binaryVersion[b];
  // An unknown creation time ranks after every known one.
  const ca = creationTime[a];
  const cb = creationTime[b];
  const unknownA = ca === I64_MIN;
  const unknownB = cb === I64_MIN;
  if (unknownA !== unknownB) return unknownB;
  return ca < cb;
}
