// Unit tests of how a lane records what the SDK answered: for every code of the error table
// (src/protocol/errors.ts, read here, not copied) an answer with that code is `fail` when the
// table calls it definite and `info` when it does not, for each kind of operation; 410 on a settle
// is `info {status: 410}`; a codeless answer and every transport error are `info`. The answers
// come from a plain HTTP server that plays a node answering the code asked for, through the real
// SDK and the real lane.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { ERRORS, type ErrorCode } from "../../protocol/errors.js";
import { Lane, failureOutcome, type Delivery, type OpRecorder } from "./ops.js";
import type { CompletionType } from "./protocol.js";
import { NaradConnectionError } from "../../client/index.js";

interface Line {
  p: string;
  type: "invoke" | CompletionType;
  f?: string;
  value: Record<string, unknown>;
}

/** Records like the driver's recorder does, into memory. */
function memoryRecorder(lines: Line[]): OpRecorder {
  return {
    async invoke(p, f, value) {
      lines.push({ p, type: "invoke", f, value });
    },
    complete(p, type, value) {
      lines.push({ p, type, value });
    },
  };
}

/** The error answer of `code`, as a node sends it (status and JSON body from the table). */
function answer(code: ErrorCode): { status: number; body: string } {
  return { status: ERRORS[code].status, body: JSON.stringify({ error: { code, message: ERRORS[code].message } }) };
}

const CODES = Object.keys(ERRORS) as ErrorCode[];
const DELIVERY: Delivery = { msg: "m-p0-0", partition: 0, offset: 0, handle: "h1", deliveryCount: 1 };

describe("lane outcomes from the error table", () => {
  let server: Server;
  let url: string;
  /** What the next request answers: an error code, a codeless status, or a hang. */
  let next: { code: ErrorCode } | { status: number } | "hang" = { status: 500 };
  const hung: (() => void)[] = [];

  before(async () => {
    server = createServer((req, res) => {
      req.resume();
      req.on("end", () => {
        if (next === "hang") {
          hung.push(() => res.destroy());
          return;
        }
        if ("code" in next) {
          const a = answer(next.code);
          res.writeHead(a.status, { "content-type": "application/json" }).end(a.body);
        } else {
          res.writeHead(next.status).end();
        }
      });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(async () => {
    for (const h of hung) h();
    await new Promise<void>((r) => server.close(() => r()));
  });

  /** The completion a lane records for each kind of operation while the node answers `code`. */
  async function completions(code: ErrorCode): Promise<Record<string, Line[]>> {
    next = { code };
    const lines: Line[] = [];
    const lane = new Lane("p0", url, memoryRecorder(lines), { requestTimeoutMs: 5_000 });
    const out: Record<string, Line[]> = {};
    const done = (from: number) => lines.slice(from).filter((l) => l.type !== "invoke");
    try {
      let at = lines.length;
      await lane.produce("t", "m-p0-1", Buffer.from("m-p0-1\n"), null);
      out["produce"] = done(at);
      at = lines.length;
      await lane.consume("t", 0);
      out["consume"] = done(at);
      for (const action of ["ack", "extend", "nack"] as const) {
        at = lines.length;
        await lane.settle("t", DELIVERY, action);
        out[action] = done(at);
      }
      at = lines.length;
      await lane.replay("t", 0, 0, 10);
      out["replay"] = done(at);
      at = lines.length;
      await lane.consumeAcking("t", 0, DELIVERY);
      out["consumeAcking"] = done(at);
    } finally {
      await lane.close();
    }
    return out;
  }

  for (const code of CODES) {
    const spec = ERRORS[code];
    const expected: CompletionType = spec.definite ? "fail" : "info";
    test(`${spec.status} ${code} (${spec.definite ? "definite" : "indefinite"}) is recorded as ${code === "receipt_handle_gone" ? "info {status: 410}" : expected} by every operation`, async () => {
      const got = await completions(code);
      for (const [op, lines] of Object.entries(got)) {
        const want = op === "consumeAcking" ? 2 : 1;
        assert.equal(lines.length, want, `${op}: ${want} completion(s)`);
        for (const l of lines) {
          if (code === "receipt_handle_gone") {
            // A 410 leased nothing: the riding consume fails for certain; every other operation is ambiguous.
            const consumeOfRiding = op === "consumeAcking" && l.p === "p0";
            assert.equal(l.type, consumeOfRiding ? "fail" : "info", `${op} ${l.p}`);
            assert.deepEqual(l.value, { status: 410 }, `${op} ${l.p}`);
          } else {
            assert.equal(l.type, expected, `${op} ${l.p}: ${code} is ${spec.definite ? "definite" : "indefinite"} in the table`);
            assert.deepEqual(l.value, { status: spec.status, error: code }, `${op} ${l.p}`);
          }
        }
      }
    });
  }

  test("503 ownership_lost is indefinite in the table, so a produce that got it is info, not fail", async () => {
    assert.equal(ERRORS.ownership_lost.status, 503);
    assert.equal(ERRORS.ownership_lost.definite, false);
    const got = await completions("ownership_lost");
    assert.deepEqual(got["produce"], [{ p: "p0", type: "info", value: { status: 503, error: "ownership_lost" } }]);
  });

  test("an answer without a code of the table is info, whatever its status", async () => {
    for (const status of [400, 404, 429, 500, 502, 503]) {
      next = { status };
      const lines: Line[] = [];
      const lane = new Lane("p0", url, memoryRecorder(lines), { requestTimeoutMs: 5_000 });
      try {
        await lane.produce("t", "m-p0-2", Buffer.from("m-p0-2\n"), null);
      } finally {
        await lane.close();
      }
      assert.deepEqual(lines[1], { p: "p0", type: "info", value: { status } }, `status ${status} without a code`);
    }
  });

  test("no answer in time is info, with the SDK's code", async () => {
    next = "hang";
    const lines: Line[] = [];
    const lane = new Lane("p0", url, memoryRecorder(lines), { requestTimeoutMs: 1_000 });
    try {
      const out = await lane.produce("t", "m-p0-3", Buffer.from("m-p0-3\n"), null);
      assert.equal(out.type, "info");
      assert.equal(out.status, null);
      assert.match(String(out.value["error"]), /^request_timeout/);
    } finally {
      await lane.close();
    }
  });

  test("a refused connection is info, although the SDK calls it definite (nothing says what the node behind a proxy did)", async () => {
    // A port that was just free: nothing listens there.
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, "127.0.0.1", r));
    const port = (probe.address() as AddressInfo).port;
    await new Promise<void>((r) => probe.close(() => r()));
    const lines: Line[] = [];
    const lane = new Lane("p0", `http://127.0.0.1:${port}`, memoryRecorder(lines), { requestTimeoutMs: 2_000 });
    try {
      const out = await lane.produce("t", "m-p0-4", Buffer.from("m-p0-4\n"), null);
      assert.equal(out.type, "info");
      assert.match(String(out.value["error"]), /^connection_failed/);
    } finally {
      await lane.close();
    }
    const refused = new NaradConnectionError("cannot connect");
    assert.equal(refused.definite, true);
    assert.equal(failureOutcome(refused).type, "info");
  });
});
