// Usage: what you spent this month (or any window), by day as a chart and a table, and by
// model; administrators also see every user's. All of it comes from the usage reports
// (GET /me/usage, GET /admin/usage), which the server keeps as it reads the bus.

import { useState } from "react";
import { api } from "../api";
import { useResource } from "../resource";
import type { UsageLine, UsageReport } from "../types";
import { ErrorText } from "../components/Status";

const money = (usd: number) => `$${usd.toFixed(usd < 1 ? 4 : 2)}`;

function Table({ report, by, label }: { report: UsageReport; by: "day" | "model" | "user"; label: string }) {
  const name = (l: UsageLine) => (by === "model" ? l.model || "(no model)" : (l[by] ?? ""));
  return (
    <table className="audit" aria-label={label}>
      <thead>
        <tr>
          <th>{by === "user" ? "Member" : by === "model" ? "Model" : "Day"}</th>
          <th>Tokens in</th>
          <th>Tokens out</th>
          <th>Cost</th>
          <th>Conversations</th>
          <th>LLM calls</th>
          <th>Sandbox time</th>
        </tr>
      </thead>
      <tbody>
        {[...report.rows, { ...report.total, [by]: "Total" } as UsageLine].map((l) => (
          <tr key={name(l)}>
            <td>{name(l)}</td>
            <td>{l.tokens_in}</td>
            <td>{l.tokens_out}</td>
            <td>{money(l.cost_usd)}</td>
            <td>{l.conversations}</td>
            <td>{l.llm_calls}</td>
            <td>{Math.round(l.sandbox_seconds / 60)} min</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** Cost by day as bars (no library: one SVG rectangle a day). */
function Chart({ report }: { report: UsageReport }) {
  const max = Math.max(...report.rows.map((r) => r.cost_usd), 0.000001);
  const w = Math.max(report.rows.length * 28, 120);
  return (
    <svg role="img" aria-label="Cost by day" width={w} height={130} className="usage-chart">
      {report.rows.map((r, i) => {
        const h = Math.round((r.cost_usd / max) * 100);
        return (
          <g key={r.day}>
            <rect x={i * 28 + 4} y={110 - h} width={20} height={h} fill="var(--accent)">
              <title>{`${r.day}: ${money(r.cost_usd)}`}</title>
            </rect>
            <text x={i * 28 + 14} y={125} fontSize={9} textAnchor="middle">
              {r.day?.slice(8)}
            </text>
          </g>
        );
      })}
    </svg>
  );
}

export function Usage({ admin }: { admin: boolean }) {
  const [from, setFrom] = useState("");
  const report = useResource(
    () => Promise.all([api.usage("day", from), api.usage("model", from), admin ? api.usageByUser(from) : Promise.resolve(undefined)]),
    [from, admin],
    [undefined, undefined, undefined] as [UsageReport | undefined, UsageReport | undefined, UsageReport | undefined],
  );
  const [byDay, byModel, byUser] = report.data;
  const error = report.error;
  return (
    <section className="page">
      <h1>Usage</h1>
      <div className="inline-form">
        <label>
          From <input type="date" aria-label="From" value={from} onChange={(e) => setFrom(e.target.value)} />
        </label>
        <a className="button ghost" href={api.usageCsvUrl(from)} download="halyard-usage.csv">
          Export CSV
        </a>
      </div>
      <ErrorText error={error} />
      {byDay && (
        <>
          <p role="status" aria-label="Total">
            {money(byDay.total.cost_usd)} over {byDay.total.llm_calls} LLM calls in {byDay.total.conversations} conversations since{" "}
            {byDay.from.slice(0, 10)}.
          </p>
          <Chart report={byDay} />
          <Table report={byDay} by="day" label="Your usage by day" />
        </>
      )}
      {byModel && (
        <>
          <h2>By model</h2>
          <Table report={byModel} by="model" label="Your usage by model" />
        </>
      )}
      {byUser && (
        <>
          <h2>Everyone</h2>
          <Table report={byUser} by="user" label="Usage by member" />
        </>
      )}
    </section>
  );
}
