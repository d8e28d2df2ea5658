// The access model: users, grants, patterns, and the decision "may this principal do this".
// Pure functions; storage and HTTP live elsewhere.
//
// Actions: produce (to matching topics), consume (consume, ack, extend, nack, replay on matching
// topics), create (topics with matching names; the creator owns the topic), admin (everything,
// users included; no pattern). A pattern is an exact topic name (`orders`) or a prefix wildcard
// (`orders-*`: every name that starts with `orders-`). A topic's owner may change and delete it
// without further grants. A topic records its owner by user id, not name: a user created with a
// deleted user's name is not the owner of what the deleted one created.

export const ACTIONS = ["produce", "consume", "create", "admin"] as const;
export type Action = (typeof ACTIONS)[number];

export interface Grant {
  action: Action;
  /** null for admin. */
  pattern: string | null;
}

export const USER_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$/;
/** A user id: 16 random bytes, hex. */
export const USER_ID_RE = /^[0-9a-f]{32}$/;
export const PASSWORD_BYTES_MIN = 8;
export const PASSWORD_BYTES_MAX = 1024;
/** A pattern: a topic name, or a topic-name prefix followed by `*`. */
export const PATTERN_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$|^[A-Za-z0-9][A-Za-z0-9._-]{0,198}\*$|^\*$/;

export function isAction(s: unknown): s is Action {
  return typeof s === "string" && (ACTIONS as readonly string[]).includes(s);
}

export function patternMatches(pattern: string, topic: string): boolean {
  if (pattern.endsWith("*")) return topic.startsWith(pattern.slice(0, -1));
  return pattern === topic;
}

/** Validates a grant request; returns the grant or a reason. */
export function parseGrant(action: unknown, pattern: unknown): Grant | string {
  if (!isAction(action)) return `action must be one of ${ACTIONS.join(", ")}`;
  if (action === "admin") {
    if (pattern !== undefined && pattern !== null && pattern !== "") return "admin takes no pattern";
    return { action, pattern: null };
  }
  if (typeof pattern !== "string" || !PATTERN_RE.test(pattern)) {
    return "pattern must be a topic name (orders) or a prefix wildcard (orders-*)";
  }
  return { action, pattern };
}

export interface Principal {
  name: string;
  /** The user's id: what topic ownership is keyed on. */
  id: string;
  grants: readonly Grant[];
}

export function isAdmin(p: Principal): boolean {
  return p.grants.some((g) => g.action === "admin");
}

export function allows(p: Principal, action: Exclude<Action, "admin">, topic: string): boolean {
  for (const g of p.grants) {
    if (g.action === "admin") return true;
    if (g.action === action && g.pattern !== null && patternMatches(g.pattern, topic)) return true;
  }
  return false;
}

/** May see the topic exists (describe, list): any grant that matches it, ownership, or admin. `ownerId`: the topic's owner's user id. */
export function canSee(p: Principal, topic: string, ownerId: string | null): boolean {
  if (ownerId !== null && ownerId === p.id) return true;
  return p.grants.some((g) => g.action === "admin" || (g.pattern !== null && patternMatches(g.pattern, topic)));
}

/** May change or delete the topic: its owner, or an admin. */
export function canManage(p: Principal, ownerId: string | null): boolean {
  return isAdmin(p) || (ownerId !== null && ownerId === p.id);
}
