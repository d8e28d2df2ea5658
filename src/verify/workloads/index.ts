// Workloads and calibration: public entry. driver.ts runs one workload end to end; calibrate.ts
// runs the seeded bugs against the workloads that must catch them; workloads.ts is the table.
export {
  runWorkload,
  verdictExitCode,
  RUN_LIMITS,
  MAIN_TOPIC,
  PROBE_TOPIC,
  PROBE_VISIBILITY_TIMEOUT_MS,
  type RunOptions,
  type RunResult,
  type RunProgress,
  type Finding,
} from "./driver.js";
export { NextWaveUnsupported } from "./next-wave.js";
export { WORKLOADS, WORKLOAD_NAMES, NEXT_WAVE_WORKLOADS, CHILD_DELAY_MS, CHILDREN_CYCLE, isWorkloadName, type WorkloadName, type WorkloadProfile, type ChildProfile } from "./workloads.js";
export { LoadCycle, type CycleSpec } from "./cycle.js";
export { calibrate, CALIBRATION_CASES, ISSUE14_CALIBRATION_CASES, formatCalibrationTable, calibrationFailures, type CalibrationCase, type CalibrationRow, type CalibrationOptions } from "./calibrate.js";
export { encodePayload, decodePayload } from "./ops.js";
export { deriveSeed } from "./roles.js";
