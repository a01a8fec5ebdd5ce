// Slack, as the Slack-link specs need it: its Web API as an automation calls it (every method
// answers ok; the private messages are kept; users.info and team.info name the user and the
// workspace), and a mention posted to an automation's hook as Slack signs it.

import { createHmac } from "node:crypto";
import { createServer } from "node:http";
import { expect } from "./fixtures";

export type SlackApi = { url: string; told: { user: string; text: string }[]; close: () => void };

export async function slackWebApi(): Promise<SlackApi> {
  const told: { user: string; text: string }[] = [];
  const server = createServer((req, res) => {
    let raw = "";
    req.on("data", (c) => (raw += c));
    req.on("end", () => {
      if (req.url === "/chat.postEphemeral") told.push(JSON.parse(raw));
      let answer: object = { ok: true };
      if (req.url?.startsWith("/users.info?user=U0999XYZ")) answer = { ok: true, user: { id: "U0999XYZ", name: "bob.b", real_name: "Bob Builder" } };
      if (req.url?.startsWith("/team.info")) answer = { ok: true, team: { id: "T0ACME01", name: "Acme", domain: "acme-corp" } };
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify(answer));
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  return { url: `http://127.0.0.1:${port}`, told, close: () => server.close() };
}

/** Posts a mention of the bot by Slack user `user` (of workspace `team`, if named) to `hookUrl`,
 *  signed with `signing`, and returns the sign-in link the bot then sent that user privately. */
export async function mentionFrom(slack: SlackApi, hookUrl: string, signing: string, user: string, team?: string): Promise<string> {
  const before = slack.told.length;
  const event = { type: "app_mention", user, channel: "C0123ABC", text: "<@U0BOT> help", ts: "1700000000.000100" };
  const body = JSON.stringify({ type: "event_callback", event_id: `Ev${Date.now()}`, ...(team ? { team_id: team } : {}), event });
  const ts = Math.floor(Date.now() / 1000);
  const signature = "v0=" + createHmac("sha256", signing).update(`v0:${ts}:${body}`).digest("hex");
  const res = await fetch(hookUrl, {
    method: "POST",
    headers: { "content-type": "application/json", "x-slack-request-timestamp": String(ts), "x-slack-signature": signature },
    body,
  });
  expect(res.status).toBe(202);
  await expect.poll(() => slack.told.length, { timeout: 20_000 }).toBe(before + 1);
  expect(slack.told[before].user).toBe(user);
  return slack.told[before].text.match(/\/link\/slack\/[0-9a-f]{64}/)![0];
}
