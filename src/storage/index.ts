// The storage layer's public API. The broker imports from here only.
export type {
  AckLog,
  AckLogOptions,
  AppendInput,
  PartitionLog,
  RecoveryReport,
  StorageOptions,
  StoredRecord,
  SyncInfo,
} from "./types.js";
export { StorageError, type StorageErrorCode } from "./errors.js";
export { realFs, type StorageFs, type DirEntry, type FsCallback } from "./fs.js";
export { openPartitionLog, FilePartitionLog, type LogStats } from "./partition-log.js";
export { openAckLog, FileAckLog, type AckLogRecovery, type AckLogStats, ACK_LOG_FILE, ACK_SNAPSHOT_FILE } from "./ack-log.js";
export { PAYLOAD_BYTES_MAX, KEY_BYTES_MAX, ATTR_BYTES_MAX, recordBytes } from "./record.js";
export { encodeAttrs, decodeAttrs, ATTR_TAG, PRODUCER_ID_BYTES, type RecordAttrs, type RecordOrigin } from "./attrs.js";
export { ForwardingAckLog } from "./forwarding-ack-log.js";
export { truncateLogDir, resetLogDir, type TruncateReport } from "./truncate.js";
