// Users and grants of a cluster: the control plane's, with two things added for the HTTP layer.
// A change is answered only after the other live nodes re-read it (the same barrier as topic
// changes, src/cluster/service.ts), so a user created through one node can log in through the
// next at once; and the control plane's unavailability is the table's 503
// control_plane_unavailable. Reads come from the control plane's cached view, so
// authentication keeps working while PostgreSQL is away.

import type { Grant } from "../auth/model.js";
import type { ControlPlane } from "./control-plane.js";
import { cpCall } from "./service.js";
import type { StoredUser, UserStoreApi, UserSummary } from "../auth/user-store-api.js";

export class ClusterUsers implements UserStoreApi {
  constructor(
    private readonly cp: ControlPlane,
    private readonly barrier: (targets: string[]) => Promise<void>,
  ) {}

  get userCount(): number {
    return this.cp.userCount;
  }

  generation(name: string): number | undefined {
    return this.cp.generation(name);
  }

  get(name: string): StoredUser | undefined {
    return this.cp.get(name);
  }

  list(): UserSummary[] {
    return this.cp.list();
  }

  grants(name: string): Grant[] {
    return this.cp.grants(name);
  }

  private async changed<T>(name: unknown, fn: () => Promise<T>): Promise<T> {
    const r = await cpCall(fn);
    if (typeof name === "string") await this.barrier([`user:${name}`]);
    return r;
  }

  addUser(name: unknown, password: unknown, nowMs: number, grants?: Grant[]): Promise<UserSummary> {
    return this.changed(name, () => this.cp.addUser(name, password, nowMs, grants));
  }

  setPassword(name: string, password: unknown): Promise<void> {
    return this.changed(name, () => this.cp.setPassword(name, password));
  }

  deleteUser(name: string): Promise<void> {
    return this.changed(name, () => this.cp.deleteUser(name));
  }

  addGrant(name: string, g: Grant): Promise<Grant> {
    return this.changed(name, () => this.cp.addGrant(name, g));
  }

  revokeGrant(name: string, g: Grant): Promise<void> {
    return this.changed(name, () => this.cp.revokeGrant(name, g));
  }
}
