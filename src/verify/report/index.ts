// Reports of a check: the terminal summary, the JSON document and the self-contained HTML page,
// and `narad verify check`, the command that prints them.
export { formatSummary, duration, type SummaryOptions } from "./terminal.js";
export { renderJson } from "./json.js";
export { renderHtml } from "./html.js";
export { runCheckCommand, EXIT_VALID, EXIT_INVALID, EXIT_UNKNOWN, EXIT_CANNOT_READ, type CheckCommandArgs } from "./command.js";
