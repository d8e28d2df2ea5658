// A cluster's producer ids live in the control plane (narad.producers, migration 4), so a producer
// given its id by one node is known to every node, and a restart of any node forgets nothing.
// The control plane's unavailability is the table's 503 control_plane_unavailable (definite:
// nothing was minted or produced), as for the other control-plane writes.

import type { ProducerIdStore } from "../broker/producer-ids.js";
import type { ControlPlane } from "./control-plane.js";
import { cpCall } from "./service.js";

export class ClusterProducerIds implements ProducerIdStore {
  constructor(
    private readonly cp: ControlPlane,
    private readonly idleExpiryMs: number,
    private readonly idsMax: number,
  ) {}

  insert(id: string): Promise<void> {
    return cpCall(() => this.cp.insertProducer(id, this.idleExpiryMs, this.idsMax));
  }

  touch(id: string): Promise<boolean> {
    return cpCall(() => this.cp.touchProducer(id, this.idleExpiryMs));
  }
}
