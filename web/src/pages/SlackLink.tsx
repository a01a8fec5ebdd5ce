// The page a Slack sign-in link opens (`/link/slack/<code>`): says which automation and Slack
// user it links to the signed-in account, and links them when asked. A link works once.

import { useEffect, useState } from "react";
import { api, errorText } from "../api";
import type { SlackLinkInfo } from "../types";
import { ErrorText } from "../components/Status";

export function SlackLink({ code, me }: { code: string; me: string }) {
  const [info, setInfo] = useState<SlackLinkInfo>();
  const [done, setDone] = useState<SlackLinkInfo>();
  const [error, setError] = useState<string>();

  useEffect(() => {
    api.slackLink(code).then(setInfo, (e) => setError(errorText(e)));
  }, [code]);

  const link = async () => {
    try {
      setDone(await api.linkSlack(code));
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
            Slack user <code>{info.slack_user}</code> asked the automation <strong>{info.automation}</strong> (of {info.owner}) for
            work. Link that Slack account to your Halyard account, <strong>{me}</strong>? Its mentions will then start conversations
            that run as you, with your settings.
          </p>
          <button onClick={link}>Link my Slack account</button>
        </div>
      )}
      {done && (
        <p role="status">
          Linked: Slack user <code>{done.slack_user}</code> is {done.linked_to}. Mention the bot in Slack again.
        </p>
      )}
    </section>
  );
}
