// NATS JetStream through nats.js as a system under the stream model (issue 15, seed 002): the
// server, the clients under test, the scenarios, one run, and the verdict matrix.
export { startNatsServer, findNatsServer, NATS_INSTALL_HINT, type NatsServer } from "./server.js";
export { ALL_GENERATIONS, CALIBRATION_GENERATIONS, CLIENT_GENERATIONS, CONSUMER_APIS, clientName, startConsumer, startPublisher, type ClientGeneration, type ConsumerApi } from "./clients.js";
export { CALIBRATION_SCENARIOS, NATS_SCENARIOS, natsScenario, type NatsScenario } from "./scenarios.js";
export { runNatsScenario, DRAIN_TIMEOUT_MS, PUBLISH_INTERVAL_MS, type NatsRunOptions, type NatsRunResult } from "./run.js";
