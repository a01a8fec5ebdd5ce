// A custom ACP agent, written with the protocol's reference SDK (npm @agentclientprotocol/sdk),
// that does its work in the client's terminals (`terminal/*`) as an agent built for editors
// does: each prompt `run: <command>` becomes a tool call that asks permission, runs the command
// in a terminal the client made (`bash -c`, with an environment variable of the agent's and an
// output limit), embeds the terminal in the tool call, waits for it to exit, releases it and
// says how it ended. A `session/cancel` kills the terminal's command and ends the turn
// `cancelled`. It calls no LLM: it stands for the editor-side agents whose tools are the
// client's. tests/tests/acp_agents.rs registers it as a deployment's custom agent.

import { randomUUID } from "node:crypto";
import { Readable, Writable } from "node:stream";
import { agent, ndJsonStream } from "@agentclientprotocol/sdk";

const cancels = new Map();
let calls = 0;
let terminalOffered = false;

const text = (prompt) => prompt.filter((b) => b.type === "text").map((b) => b.text).join("\n");

async function runCommand(client, sessionId, cwd, command, cancelled) {
  const toolCallId = `run-${++calls}`;
  const call = { toolCallId, title: command, kind: "execute", status: "pending", rawInput: { command } };
  await client.notify("session/update", { sessionId, update: { sessionUpdate: "tool_call", ...call } });
  const answer = await client.request("session/request_permission", {
    sessionId,
    toolCall: call,
    options: [
      { optionId: "yes", name: "Run it", kind: "allow_once" },
      { optionId: "no", name: "Don't", kind: "reject_once" },
    ],
  });
  if (answer.outcome.outcome !== "selected" || answer.outcome.optionId !== "yes") {
    const update = { sessionUpdate: "tool_call_update", toolCallId, status: "failed", rawOutput: "not run: refused" };
    await client.notify("session/update", { sessionId, update });
    return { said: "I did not run it." };
  }
  const terminal = await client.createTerminal({
    sessionId,
    command: "bash",
    args: ["-c", command],
    env: [{ name: "AGENT_GREETING", value: "hello from the agent" }],
    cwd,
    outputByteLimit: 4096,
  });
  const running = [{ type: "terminal", terminalId: terminal.id }];
  await client.notify("session/update", { sessionId, update: { sessionUpdate: "tool_call_update", toolCallId, status: "in_progress", content: running } });
  const exit = await Promise.race([terminal.waitForExit(), cancelled.then(() => null)]);
  if (exit === null) {
    await terminal.kill();
  }
  const { output, exitStatus } = await terminal.currentOutput();
  await terminal.release();
  const status = exitStatus?.exitCode === 0 ? "completed" : "failed";
  await client.notify("session/update", { sessionId, update: { sessionUpdate: "tool_call_update", toolCallId, status, content: running } });
  return { said: `exit ${exitStatus?.exitCode}: ${output.trim()}`, cancelled: exit === null };
}

const app = agent()
  .onRequest("initialize", async ({ params }) => {
    terminalOffered = params.clientCapabilities?.terminal === true;
    return {
      protocolVersion: 1,
      agentCapabilities: { loadSession: false },
      agentInfo: { name: "terminal-agent", title: "Terminal agent", version: "1.0.0" },
      authMethods: [],
    };
  })
  .onRequest("session/new", async ({ params }) => {
    const sessionId = randomUUID();
    cancels.set(sessionId, { cwd: params.cwd });
    return { sessionId };
  })
  .onRequest("session/prompt", async ({ params, client }) => {
    const { sessionId } = params;
    const session = cancels.get(sessionId) ?? { cwd: process.cwd() };
    let cancel;
    session.cancelled = new Promise((resolve) => (cancel = resolve));
    session.cancel = cancel;
    cancels.set(sessionId, session);
    const asked = text(params.prompt);
    const match = asked.match(/run: (.*)/s);
    let reply;
    if (!terminalOffered) {
      reply = { said: "This client offers no terminal." };
    } else if (!match) {
      reply = { said: "Say `run: <command>`." };
    } else {
      reply = await runCommand(client, sessionId, session.cwd, match[1].trim(), session.cancelled);
    }
    const update = { sessionUpdate: "agent_message_chunk", content: { type: "text", text: reply.said } };
    await client.notify("session/update", { sessionId, update });
    return { stopReason: reply.cancelled ? "cancelled" : "end_turn" };
  })
  .onNotification("session/cancel", async ({ params }) => {
    cancels.get(params.sessionId)?.cancel?.();
  });

const connection = app.connect(ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
await connection.closed;
