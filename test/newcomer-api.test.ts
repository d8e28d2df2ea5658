// Issue 16, the HTTP API's first-hour items, each test named after what broke. Item 10: a topic
// create without a name said "Topic name undefined is not valid"; topic create took text/plain
// while a batch answered 415 for it; a refused start without --dev left ./narad-data/ behind.

import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdir, readdir } from "node:fs/promises";
import { join } from "node:path";
import { removeDir, runNarad, tempDir } from "./harness.js";
import { nodeForSuite } from "./support/suite-node.js";

async function post(url: string, body: string, contentType?: string): Promise<{ status: number; body: { error?: { code: string; message: string } } }> {
  const r = await fetch(url, { method: "POST", body, headers: contentType === undefined ? {} : { "content-type": contentType } });
  const text = await r.text();
  return { status: r.status, body: text === "" ? {} : (JSON.parse(text) as { error?: { code: string; message: string } }) };
}

describe("issue 16 item 10: topic create and JSON bodies", () => {
  const suite = nodeForSuite();

  it("POST /v1/topics with {} says the name is required (it said \"Topic name undefined is not valid\")", async () => {
    const r = await post(`${suite.node.url}/v1/topics`, "{}", "application/json");
    assert.equal(r.status, 400);
    assert.equal(r.body.error?.code, "invalid_topic_name");
    assert.match(r.body.error!.message, /"name" is required/);
    assert.doesNotMatch(r.body.error!.message, /undefined/);
  });

  it("every JSON body takes the same content types (topic create took text/plain, a batch answered 415 for it)", async () => {
    const batch = JSON.stringify({ messages: [{ payload_base64: Buffer.from("hi").toString("base64") }] });
    // What curl -d (form), fetch with a string (text/plain) and JSON clients send: all read as JSON.
    for (const [i, type] of [undefined, "application/json", "application/json; charset=utf-8", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded"].entries()) {
      assert.equal((await post(`${suite.node.url}/v1/topics`, JSON.stringify({ name: `ct${i}`, partitions: 1 }), type)).status, 201, String(type));
      assert.equal((await post(`${suite.node.url}/v1/topics/ct${i}/messages/batch`, batch, type)).status, 202, String(type));
    }
    // Another encoding named: 415 on both, naming JSON.
    for (const path of ["/v1/topics", "/v1/topics/ct0/messages/batch"]) {
      const r = await post(`${suite.node.url}${path}`, JSON.stringify({ name: "xml" }), "application/xml");
      assert.equal(r.status, 415, path);
      assert.equal(r.body.error?.code, "unsupported_media_type");
      assert.match(r.body.error!.message, /application\/json/);
    }
  });
});

describe("issue 16 item 10: a refused start", () => {
  it("a refused start without --dev leaves no ./narad-data/ behind (it left an empty node's files)", async () => {
    const cwd = await tempDir();
    try {
      const r = await runNarad(["server", "start", "--listen", "127.0.0.1:0"], { cwd, env: { NARAD_ADMIN_PASSWORD: "" } });
      assert.equal(r.code, 1);
      assert.match(r.stderr, /NARAD_ADMIN_PASSWORD/);
      assert.equal(existsSync(join(cwd, "narad-data")), false, "the data directory it made is gone");
    } finally {
      await removeDir(cwd);
    }
  });

  it("a refused start keeps a data directory that was there before it", async () => {
    const cwd = await tempDir();
    try {
      const dir = join(cwd, "kept");
      await mkdir(dir);
      const r = await runNarad(["server", "start", "--listen", "127.0.0.1:0", "--data-dir", dir], { cwd, env: { NARAD_ADMIN_PASSWORD: "" } });
      assert.equal(r.code, 1);
      assert.ok(existsSync(dir));
      assert.ok((await readdir(dir)).length > 0, "what the start wrote in it stays: the directory was the operator's");
    } finally {
      await removeDir(cwd);
    }
  });
});
