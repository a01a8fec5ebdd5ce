// Linear's own verifier (@linear/sdk's LinearWebhookClient), for the automation tests: whether a
// request Halyard's tests sign is one Linear's SDK accepts.
//   node linear-verify.mjs SECRET SIGNATURE < body    prints `verified` or why not
import { readFileSync } from "node:fs";
import { LinearWebhookClient } from "@linear/sdk/webhooks";

const [secret, signature] = process.argv.slice(2);
try {
  new LinearWebhookClient(secret).verify(readFileSync(0), signature);
  process.stdout.write("verified");
} catch (e) {
  process.stdout.write(`refused: ${e.message}`);
}
