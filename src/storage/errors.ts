// Operating errors of the storage layer. The broker maps `storage_failed` to 500 storage_failed
// and `log_closed` to 503 (the partition is going away); neither is a bug.

export type StorageErrorCode = "storage_failed" | "log_closed";

export class StorageError extends Error {
  override readonly name = "StorageError";
  constructor(
    readonly code: StorageErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
