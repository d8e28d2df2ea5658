// The client workload (issue 15, Narad's SDK): scenarios with written predictions run against the
// SDK's consumer loops through the fault proxy, judged by the lease model and against the
// predictions; and the calibration on seeded SDK bugs. docs/verification-clients.md describes it.
export { CLIENT_SCENARIOS, CLIENT_SCENARIO_NAMES, CLIENT_OPTIONS, CONSUMER_APIS, clientScenario, type ClientScenario, type ClientPrediction, type ClientFault, type ConsumerApi } from "./scenarios.js";
export { runClientScenario, TOPICS, type ClientRunOptions, type ClientRunResult, type ClientRecord } from "./run.js";
export { measureLane, findings, type LaneMeasure, type AppEvent, type FaultWindow } from "./judge.js";
export { formatClientSummary, renderClientHtml } from "./report.js";
export { CLIENT_SEEDED_BUGS, CLIENT_BUG_NAMES, isClientBugName, type ClientBugName } from "./seeded-bugs.js";
export { CLIENT_CALIBRATION_CASES, calibrateClients, formatClientCalibrationTable, judgeClientRow, type ClientCalibrationCase, type ClientCalibrationRow } from "./calibrate.js";
