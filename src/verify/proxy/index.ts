// The fault proxy: public entry. See proxy.ts for the design and control.ts for the control API.
export {
  startProxy,
  validateToxic,
  countersToJson,
  toxicToJson,
  toxicFromJson,
  DIRECTIONS,
  TOXIC_KINDS,
  TOXIC_LIMITS,
  PROXY_DEFAULTS,
  BANDWIDTH_BURST_MS,
  type Direction,
  type DirectionSpec,
  type Toxic,
  type ToxicKind,
  type Proxy,
  type ProxyOptions,
  type ProxyCounters,
  type DirectionCounters,
} from "./proxy.js";
export {
  runProxyCommand,
  startProxyControl,
  parseHostPort,
  CONTROL_BODY_BYTES_MAX,
  type ProxyControl,
  type ProxyCommandOptions,
} from "./control.js";
