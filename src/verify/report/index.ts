// Reports of a check: the terminal summary, the JSON document and the self-contained HTML page.
export { formatSummary, duration, type SummaryOptions } from "./terminal.js";
export { renderJson } from "./json.js";
export { renderHtml } from "./html.js";
