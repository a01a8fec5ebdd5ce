// The page a Slack sign-in link opens (`/link/slack/<code>`): says which automation (and whose)
// and which Slack user it links to the signed-in account, and links them when asked; whether the
// automation may also run agents as you is a choice of its own, off unless ticked (its owner
// holds its signing secret, so a mention "by" you is their word).
//
// Who the Slack user is comes from Slack: where the deployment has Sign in with Slack, anyone but
// the automation's owner links by signing in to Slack as that user (the browser goes to Slack
// and comes back here with `?linked=` or `?slack_error=`); where it has not, the link can be made
// but nothing may run as you. A link works once.

import { useEffect, useState } from "react";
import { api, errorText } from "../api";
import type { SlackLinkInfo } from "../types";
import { ErrorText } from "../components/Status";

/** What Slack's sign-in came back with, from the page's query. */
function cameBack(): { linked?: { slackUser: string; as: string; runsAsYou: boolean }; error?: string } {
  const q = new URLSearchParams(window.location.search);
  const linked = q.get("linked");
  return {
    linked: linked ? { slackUser: linked, as: q.get("as") ?? "", runsAsYou: q.get("runs_as_you") === "true" } : undefined,
    error: q.get("slack_error") ?? undefined,
  };
}

export function SlackLink({ code, me }: { code: string; me: string }) {
  const [back] = useState(cameBack);
  const [info, setInfo] = useState<SlackLinkInfo>();
  const [done, setDone] = useState<SlackLinkInfo>();
  const [error, setError] = useState<string | undefined>(back.error);
  const [runAsMe, setRunAsMe] = useState(false);

  useEffect(() => {
    if (!back.linked) api.slackLink(code).then(setInfo, (e) => setError(errorText(e)));
  }, [code, back.linked]);

  const link = async () => {
    try {
      setDone(await api.linkSlack(code, runAsMe));
      setError(undefined);
    } catch (e) {
      setError(errorText(e));
    }
  };
  const owner = info?.owner === me;
  // Slack's word, not the owner's: the browser signs in to Slack and comes back here.
  const viaSlack = !!info?.slack_sign_in && !owner;
  const canRunAsMe = owner || !!info?.slack_sign_in;
  const linked = done ? { slackUser: done.slack_user, as: done.linked_to ?? me, runsAsYou: done.runs_as_linked_user } : back.linked;

  return (
    <section className="page">
      <h1>Link your Slack account</h1>
      <ErrorText error={error} />
      {info && !linked && (
        <div className="card">
          <p>
            Slack user <strong>{info.slack_name ?? "(unnamed)"}</strong> <code>{info.slack_user}</code>
            {info.workspace ? <> of the workspace <strong>{info.workspace}</strong></> : null} asked the automation{" "}
            <strong>{info.automation}</strong> (of {info.owner}) for work. Link that Slack account to your Halyard account,{" "}
            <strong>{me}</strong>? Link it only if that is you: the names are what {info.owner}'s Slack app says.
            {viaSlack && " You will sign in to Slack to prove it: the link is made only if Slack says you are that user."}
          </p>
          <label className="check">
            <input type="checkbox" checked={runAsMe} disabled={!canRunAsMe} onChange={(e) => setRunAsMe(e.target.checked)} />
            Let this automation run agents as me, with my secrets, git providers and LLM profile, when that Slack user mentions
            it. {info.owner} holds its signing secret and can make any mention look like it came from that Slack user: tick this
            only if you trust {info.owner}.
          </label>
          {!canRunAsMe && (
            <p className="muted" data-testid="no-slack-sign-in">
              This deployment cannot ask Slack who you are (it has no Sign in with Slack), so the automation may not run as you.
            </p>
          )}
          {viaSlack ? (
            <button onClick={() => window.location.assign(api.slackStartUrl(code, runAsMe))}>
              Sign in with Slack and link
            </button>
          ) : (
            <button onClick={link}>Link my Slack account</button>
          )}
        </div>
      )}
      {linked && (
        <p role="status">
          Linked: Slack user <code>{linked.slackUser}</code> is {linked.as}.{" "}
          {linked.runsAsYou
            ? "Mention the bot in Slack again: it runs as you."
            : "Nothing will run as you until you allow it (follow a new link from the bot and tick the box)."}
        </p>
      )}
    </section>
  );
}
