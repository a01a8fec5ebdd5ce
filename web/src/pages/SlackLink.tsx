// The page a Slack sign-in link opens (`/link/slack/<code>`): says which automation (and whose)
// and which Slack user it links to the signed-in account, and links them when asked; whether the
// automation may also run agents as you is a choice of its own, off unless ticked (its owner
// holds its signing secret, so a mention "by" you is their word). A link works once.

import { useEffect, useState } from "react";
import { api, errorText } from "../api";
import type { SlackLinkInfo } from "../types";
import { ErrorText } from "../components/Status";

export function SlackLink({ code, me }: { code: string; me: string }) {
  const [info, setInfo] = useState<SlackLinkInfo>();
  const [done, setDone] = useState<SlackLinkInfo>();
  const [error, setError] = useState<string>();
  const [runAsMe, setRunAsMe] = useState(false);

  useEffect(() => {
    api.slackLink(code).then(setInfo, (e) => setError(errorText(e)));
  }, [code]);

  const link = async () => {
    try {
      setDone(await api.linkSlack(code, runAsMe));
      setError(undefined);
    } catch (e) {
      setError(errorText(e));
    }
  };

  return (
    <section className="page">
      <h1>Link your Slack account</h1>
      <ErrorText error={error} />
      {info && !done && (
        <div className="card">
          <p>
            Slack user <strong>{info.slack_name ?? "(unnamed)"}</strong> <code>{info.slack_user}</code>
            {info.workspace ? <> of the workspace <strong>{info.workspace}</strong></> : null} asked the automation{" "}
            <strong>{info.automation}</strong> (of {info.owner}) for work. Link that Slack account to your Halyard account,{" "}
            <strong>{me}</strong>? Link it only if that is you: the names are what {info.owner}'s Slack app says.
          </p>
          <label className="check">
            <input type="checkbox" checked={runAsMe} onChange={(e) => setRunAsMe(e.target.checked)} />
            Let this automation run agents as me, with my secrets, git providers and LLM profile, when that Slack user mentions
            it. {info.owner} holds its signing secret and can make any mention look like it came from that Slack user: tick this
            only if you trust {info.owner}.
          </label>
          <button onClick={link}>Link my Slack account</button>
        </div>
      )}
      {done && (
        <p role="status">
          Linked: Slack user <code>{done.slack_user}</code> is {done.linked_to}.{" "}
          {done.runs_as_linked_user
            ? "Mention the bot in Slack again: it runs as you."
            : "Nothing will run as you until you allow it (follow a new link from the bot and tick the box)."}
        </p>
      )}
    </section>
  );
}
