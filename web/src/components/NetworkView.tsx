// What the conversation's sandbox reached through its egress proxy and what it was refused
// (`GET /conversations/{id}/network`): for a sandbox held to an outbound policy, each
// destination with its connections and bytes, and each refusal with the rule that made it.
// Re-read when an observation arrives (`version`): the proxy reports traffic every few seconds.

import { useCallback, useEffect, useState } from "react";
import { api, errorText } from "../api";
import type { NetworkSummary } from "../types";
import { ErrorText } from "./Status";

/** `n` bytes as a person reads them (1 decimal past a kilobyte). */
export function size(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u += 1;
  }
  return u === 0 ? `${v} B` : `${v.toFixed(1)} ${units[u]}`;
}

export function NetworkView({ id, version }: { id: string; version: number }) {
  const [summary, setSummary] = useState<NetworkSummary>();
  const [error, setError] = useState<string>();

  const load = useCallback(() => {
    api.network(id).then(
      (s) => {
        setSummary(s);
        setError(undefined);
      },
      (e) => setError(errorText(e)),
    );
  }, [id]);

  useEffect(() => {
    const t = window.setTimeout(load, 200);
    return () => window.clearTimeout(t);
  }, [load, version]);

  const nothing = summary && summary.reached.length === 0 && summary.refused.length === 0;
  return (
    <div className="network">
      <div className="section-head">
        <h2>Network</h2>
        <button className="ghost" onClick={load}>
          Refresh
        </button>
      </div>
      <ErrorText error={error} />
      {nothing && (
        <p className="empty">
          Nothing recorded: the sandbox is not held to an outbound policy, or has reached nothing through it yet.
        </p>
      )}
      {summary && summary.reached.length > 0 && (
        <section aria-label="Reached">
          <h3>
            Reached: {size(summary.bytes_sent)} sent, {size(summary.bytes_received)} received
          </h3>
          <table className="sandboxes">
            <thead>
              <tr>
                <th>Destination</th>
                <th>Connections</th>
                <th>Sent</th>
                <th>Received</th>
              </tr>
            </thead>
            <tbody>
              {summary.reached.map((r) => (
                <tr key={`${r.host}:${r.port}`}>
                  <td>
                    <code>
                      {r.host}:{r.port}
                    </code>
                  </td>
                  <td>{r.connections ?? 0}</td>
                  <td>{size(r.bytes_sent ?? 0)}</td>
                  <td>{size(r.bytes_received ?? 0)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </section>
      )}
      {summary && summary.refused.length > 0 && (
        <section aria-label="Refused">
          <h3>Refused</h3>
          <table className="sandboxes">
            <thead>
              <tr>
                <th>Destination</th>
                <th>Rule</th>
                <th>Connections</th>
              </tr>
            </thead>
            <tbody>
              {summary.refused.map((r) => (
                <tr key={`${r.host}:${r.port}:${r.rule}`}>
                  <td>
                    <code>
                      {r.host}:{r.port}
                    </code>
                  </td>
                  <td>{r.rule}</td>
                  <td>{r.count}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </section>
      )}
    </div>
  );
}
