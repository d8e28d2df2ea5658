// The JSON report: the checker's Report as is (format "narad-check/1"), documented field by field
// in docs/verification-checker.md. Its lists are capped and its series bucketed, so its size does
// not grow with the history.

import type { Report } from "../checker/types.js";

export function renderJson(report: Report): string {
  return JSON.stringify(report, null, 2) + "\n";
}
