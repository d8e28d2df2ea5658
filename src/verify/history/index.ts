// The history format v1: types, the recorder and the reader.
export type * from "./types.js";
export { EVENT_TYPES, OP_NAMES, FAULT_KINDS, FAULT_KINDS_NEEDING_EVIDENCE, NEMESIS_PROCESS } from "./types.js";
export { createRunClock, type RunClock, type MonotonicNs } from "./clock.js";
export { HistoryWriter, HistoryOverflowError, HistoryMisuseError, type HistoryWriterOptions } from "./writer.js";
export { readHistory, parseHistoryText, acceptLine, HistoryParser, LineSplitter, HistoryReadError, LINE_BYTES_MAX, type HistorySource, type LineSink } from "./reader.js";
export { HistoryFormatError, HistoryValidator } from "./validate.js";
