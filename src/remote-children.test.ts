// The SDK-backed remote sink shares one client per URL and user and closes it with the last link
// released (pushes themselves are covered end to end by test/children.test.ts).

import { test } from "node:test";
import assert from "node:assert/strict";
import { SdkRemoteSink } from "./remote-children.js";
import type { ChildLink } from "./broker/children.js";

const link = (topic: string, url: string, user: string): ChildLink => ({ topic, kind: "remote", url, credentials: { user, password: "a-long-password" } });

test("one client per URL and user, closed when its last link is released", async () => {
  const sink = new SdkRemoteSink();
  const a = sink.open(link("x", "http://127.0.0.1:1", "u"));
  const b = sink.open(link("y", "http://127.0.0.1:1", "u"));
  const c = sink.open(link("x", "http://127.0.0.1:1", "v"));
  assert.equal(sink.openClients, 2, "two users of one URL: two clients");
  await a.release();
  await a.release(); // a second release of one handle does not count twice
  assert.equal(sink.openClients, 2, "b still holds u's client");
  await assert.rejects(a.push([]), /detached/);
  await b.release();
  assert.equal(sink.openClients, 1, "u's last link gone: its client is closed");
  await c.release();
  assert.equal(sink.openClients, 0);
  const d = sink.open(link("z", "http://127.0.0.1:1", "u"));
  assert.equal(sink.openClients, 1, "a new link opens a new client");
  await sink.close();
  assert.equal(sink.openClients, 0);
  await d.release(); // after close: nothing left to close, no error
});
