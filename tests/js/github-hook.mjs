// GitHub's side of a webhook, with GitHub's own libraries, for the automation tests:
//   node github-hook.mjs example EVENT ACTION   prints the first example payload GitHub sends
//                                               for EVENT with ACTION (@octokit/webhooks-examples)
//   node github-hook.mjs sign SECRET < body      prints the X-Hub-Signature-256 value
//                                               (@octokit/webhooks-methods)
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { sign } from "@octokit/webhooks-methods";

const [mode, a, b] = process.argv.slice(2);
if (mode === "example") {
  const require = createRequire(import.meta.url);
  const all = require("@octokit/webhooks-examples");
  const event = all.find((e) => e.name === a);
  const example = event?.examples.find((x) => x.action === b);
  if (!example) {
    console.error(`no example of ${a} ${b}`);
    process.exit(1);
  }
  process.stdout.write(JSON.stringify(example));
} else if (mode === "sign") {
  process.stdout.write(await sign(a, readFileSync(0, "utf8")));
} else {
  console.error("usage: github-hook.mjs example EVENT ACTION | sign SECRET");
  process.exit(2);
}
