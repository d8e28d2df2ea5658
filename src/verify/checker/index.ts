// The checker: history → verdict. See docs/verification-checker.md.
export { check, checkText, checkEvents } from "./check.js";
export { runCheckCommand, EXIT_VALID, EXIT_INVALID, EXIT_UNKNOWN, EXIT_CANNOT_READ, type CheckCommandArgs } from "./command.js";
export type * from "./types.js";
export { ANOMALY_NAMES } from "./types.js";
