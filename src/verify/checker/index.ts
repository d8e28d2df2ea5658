// The checker: history → verdict. See docs/verification-checker.md.
export { check, checkText, checkEvents } from "./check.js";
export type * from "./types.js";
export { ANOMALY_NAMES } from "./types.js";
