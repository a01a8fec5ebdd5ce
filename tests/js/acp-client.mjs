// Drives `halyard acp` with the Agent Client Protocol's reference client (npm
// @agentclientprotocol/sdk) through a whole session, as an editor would: initialize, a new
// session, a prompt whose command waits for permission (allowed), a second prompt interrupted by
// session/cancel, then a second connection that loads the session by id. Between them, a prompt
// that links a file of the editor's (its unsaved text in the editor, served by fs/read_text_file),
// which the conversation edits: the edit comes back by fs/write_text_file. Prints one JSON object
// with what it saw; tests/tests/acp_agents.rs checks it.
//
// Usage: node acp-client.mjs <halyard binary>   (HALYARD_URL and HALYARD_API_KEY in the environment)

import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { client, ndJsonStream } from "@agentclientprotocol/sdk";

const binary = process.argv[2];

function connect(seen) {
  const child = spawn(binary, ["acp", "--confirmation-policy", "always"], { stdio: ["pipe", "pipe", "inherit"] });
  const stream = ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const app = client()
    .onRequest("session/request_permission", async ({ params }) => {
      seen.permissions.push(params.toolCall);
      const allow = params.options.find((o) => o.kind === "allow_once");
      return { outcome: { outcome: "selected", optionId: allow.optionId } };
    })
    .onNotification("session/update", async ({ params }) => {
      seen.updates.push(params.update);
    })
    .onRequest("fs/read_text_file", async ({ params }) => {
      seen.reads.push(params.path);
      return { content: buffers.get(params.path) ?? "" };
    })
    .onRequest("fs/write_text_file", async ({ params }) => {
      seen.writes.push({ path: params.path, content: params.content });
      buffers.set(params.path, params.content);
      return {};
    });
  return { child, stream, app };
}

// The editor's buffers: notes.md is open with changes not saved to disk.
const notes = `${process.cwd()}/notes.md`;
const buffers = new Map([[notes, "unsaved editor text\n"]]);
const seen = { permissions: [], updates: [], loaded: [], reads: [], writes: [] };
const first = connect(seen);
const result = await first.app.connectWith(first.stream, async (agent) => {
  const init = await agent.request("initialize", { protocolVersion: 1, clientCapabilities: { fs: { readTextFile: true, writeTextFile: true } } });
  const session = await agent.request("session/new", { cwd: process.cwd(), mcpServers: [] });
  const done = await agent.request("session/prompt", { sessionId: session.sessionId, prompt: [{ type: "text", text: "Write done.txt" }] });
  const link = { type: "resource_link", uri: `file://${notes}`, name: "notes.md" };
  const edited = await agent.request("session/prompt", { sessionId: session.sessionId, prompt: [{ type: "text", text: "Edit notes.md" }, link] });
  // A long command, cancelled while it runs.
  const long = agent.request("session/prompt", { sessionId: session.sessionId, prompt: [{ type: "text", text: "Run the long job" }] });
  const deadline = Date.now() + 60_000;
  while (!seen.updates.some((u) => u.sessionUpdate === "tool_call" && String(u.title).includes("sleep")) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
  }
  // (Its permission is asked and given first: the policy is `always`.)
  while (seen.permissions.length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  await new Promise((r) => setTimeout(r, 1500));
  await agent.notify("session/cancel", { sessionId: session.sessionId });
  const cancelled = await long;
  return { init, sessionId: session.sessionId, done, edited, cancelled };
});
first.child.kill();

const second = connect({ permissions: [], updates: seen.loaded });
await second.app.connectWith(second.stream, async (agent) => {
  await agent.request("initialize", { protocolVersion: 1, clientCapabilities: {} });
  await agent.request("session/load", { sessionId: result.sessionId, cwd: process.cwd(), mcpServers: [] });
});
second.child.kill();
console.log(JSON.stringify({ ...result, ...seen }));
