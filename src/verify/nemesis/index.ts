// The nemesis: public entry. process.ts has the process faults, nemesis.ts the seeded schedule.
export {
  NodeProcess,
  readProcState,
  getHealth,
  NODE_PROCESS_DEFAULTS,
  START_ATTEMPTS_MAX,
  DEFAULT_NARAD_BIN,
  type NodeProcessOptions,
  type StartEvidence,
  type StopEvidence,
  type PowerLossEvidence,
  type ProcStateEvidence,
  type Health,
} from "./process.js";
export {
  Nemesis,
  applyFault,
  restoreTarget,
  interruptibleSleep,
  planFaults,
  planStep,
  INJECTED_FAULT_KINDS,
  NEMESIS_DEFAULTS,
  type FaultKind,
  type InjectedFaultKind,
  type FaultValue,
  type FaultRecorder,
  type FaultParams,
  type NemesisTarget,
  type NemesisOptions,
  type PlannedFault,
} from "./nemesis.js";
export { Prng, randomSeed } from "./prng.js";
