// What the HTTP layer and the Authenticator need from a user store: auth owns the interface, and
// two rooms implement it: the single node's UserStore (./store.ts, a JSON file in the data
// directory) and the cluster's ClusterUsers over its ControlPlane (PostgreSQL). Reads are synchronous: both serve them from memory (the control
// plane from its cached view), so authentication never waits on a database.
//
// generation(name) must change whenever the user changes (password, grants, deletion and
// re-creation), on every node: the Authenticator keys its cache of successful password checks on
// it. The control plane uses the row's version, taken from a sequence that never repeats.
//
// Every user has an id, given once at creation and never reused (USER_ID_RE, ./model.ts): the
// owner of a topic is recorded by id, so a user created later with a deleted user's name is
// another user and owns nothing of the first's.

import type { Grant } from "./model.js";
import type { hashPassword } from "./store.js";

export type PasswordHash = Awaited<ReturnType<typeof hashPassword>>;

export interface StoredUser {
  /** Immutable, random, never reused (newUserId, ./store.ts). */
  id: string;
  password: PasswordHash;
  created_at: number;
  grants: Grant[];
}

export interface UserSummary {
  name: string;
  created_at: number;
}

export interface UserStoreApi {
  readonly userCount: number;
  generation(name: string): number | undefined;
  get(name: string): StoredUser | undefined;
  list(): UserSummary[];
  /** Throws NaradError user_not_found. */
  grants(name: string): Grant[];
  /** Throws NaradError invalid_argument or user_exists. */
  addUser(name: unknown, password: unknown, nowMs: number, grants?: Grant[]): Promise<UserSummary>;
  /** Throws NaradError invalid_argument or user_not_found. */
  setPassword(name: string, password: unknown): Promise<void>;
  /** Throws NaradError user_not_found. */
  deleteUser(name: string): Promise<void>;
  /** Idempotent; throws NaradError user_not_found. */
  addGrant(name: string, g: Grant): Promise<Grant>;
  /** Throws NaradError user_not_found or grant_not_found. */
  revokeGrant(name: string, g: Grant): Promise<void>;
}
