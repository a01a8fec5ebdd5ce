// The budget banner: for each organization you are in whose monthly budget (or your own budget in
// it) is 80 % spent or more, one line under the top bar saying how much, and at 100 % that its
// conversations make no further LLM call this month. Read again on every page, each minute and
// when a budget is changed here.

import { useEffect, useState } from "react";
import { api } from "../api";
import type { BudgetStatus, BudgetUse } from "../types";

const ALERT = 80;

/** The event that has the banner read the budgets again. */
export const BUDGETS_CHANGED = "halyard:budgets";

function line(b: BudgetStatus, u: BudgetUse, whose: string): string | undefined {
  if (u.percent == null || u.percent < ALERT || u.budget_usd == null) return undefined;
  const spent = `$${u.spent_usd.toFixed(2)} of $${u.budget_usd.toFixed(2)}`;
  return u.exhausted
    ? `${whose} for ${b.month} is spent (${spent}): new conversations in ${b.org} are refused and running ones stop before their next LLM call.`
    : `${whose} for ${b.month} is ${Math.floor(u.percent)} % spent (${spent}).`;
}

export function BudgetBanner({ path }: { path: string }) {
  const [lines, setLines] = useState<{ key: string; text: string; exhausted: boolean }[]>([]);
  useEffect(() => {
    let live = true;
    const load = async () => {
      try {
        const orgs = (await api.orgs()).items;
        const states = await Promise.all(orgs.map((o) => api.org(o.name).budget()));
        const out = states.flatMap((b) =>
          [
            { key: `${b.org}`, u: b.org_budget, text: line(b, b.org_budget, `Organization ${b.org}'s monthly budget`) },
            { key: `${b.org}/you`, u: b.you, text: line(b, b.you, `Your monthly budget in ${b.org}`) },
          ].flatMap((l) => (l.text ? [{ key: l.key, text: l.text, exhausted: l.u.exhausted }] : [])),
        );
        if (live) setLines(out);
      } catch {
        // The banner is a courtesy: a failed read leaves it as it was.
      }
    };
    load();
    const timer = setInterval(load, 60_000);
    // A budget changed on this page (the organization's settings).
    window.addEventListener(BUDGETS_CHANGED, load);
    return () => {
      live = false;
      clearInterval(timer);
      window.removeEventListener(BUDGETS_CHANGED, load);
    };
  }, [path]);
  if (lines.length === 0) return null;
  return (
    <div className="budget-banner" role="status" aria-label="Budgets">
      {lines.map((l) => (
        <p key={l.key} className={l.exhausted ? "exhausted" : undefined}>
          {l.text}
        </p>
      ))}
    </div>
  );
}
