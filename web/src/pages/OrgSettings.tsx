// An organization's settings, prices and budgets, under its members on the Organizations page.
// Everyone in it sees them and this month's spending; owners and admins change them (the API
// refuses anyone else, and says why).

import { useState, type FormEvent } from "react";
import { api } from "../api";
import type { BudgetStatus, Org, OrgSettings as Settings, PriceRow } from "../types";
import { ErrorText } from "../components/Status";
import { BUDGETS_CHANGED } from "../components/BudgetBanner";
import { useResource } from "../resource";

const list = (s: string) =>
  s
    .split(",")
    .map((x) => x.trim())
    .filter(Boolean);
const money = (v?: number | null) => (v == null ? "none" : `$${v.toFixed(2)}`);
const amount = (s: string) => (s.trim() === "" ? null : Number(s));

interface Loaded {
  settings: Settings;
  profiles: string[];
  prices: PriceRow[];
  budget: BudgetStatus;
}

export function OrgSettings({ org }: { org: Org }) {
  const o = api.org(org.name);
  const manages = org.role === "owner" || org.role === "admin";
  const [saved, setSaved] = useState(false);
  // The form's text fields, as typed.
  const [form, setForm] = useState({ monthly: "", member: "", domains: "", groups: "" });
  const [price, setPrice] = useState({ model: "", input: "", output: "", cached: "" });
  const state = useResource<Loaded | undefined>(
    async () => {
      const [settings, p, pr, budget] = await Promise.all([o.settings(), o.llmProfiles.list(), o.prices.list(), o.budget()]);
      setForm({
        monthly: settings.monthly_budget_usd?.toString() ?? "",
        member: settings.member_monthly_budget_usd?.toString() ?? "",
        domains: (settings.sso_domains ?? []).join(", "),
        groups: (settings.sso_groups ?? []).join(", "),
      });
      return { settings, profiles: p.items.map((x) => x.name), prices: pr.items, budget };
    },
    [org.name],
    undefined,
  );
  const { error } = state;
  if (!state.data) return <ErrorText error={error} />;
  const loaded = state.data;
  const { settings, profiles, prices, budget } = loaded;
  const setSettings = (changed: Settings) => state.setData({ ...loaded, settings: changed });

  const save = async (e: FormEvent) => {
    e.preventDefault();
    const body: Settings = {
      ...settings,
      monthly_budget_usd: amount(form.monthly),
      member_monthly_budget_usd: amount(form.member),
      sso_domains: list(form.domains),
      sso_groups: list(form.groups),
    };
    const ok = await state.run(() => o.putSettings(body));
    setSaved(ok);
    if (ok) window.dispatchEvent(new Event(BUDGETS_CHANGED));
  };
  const putPrice = async (e: FormEvent) => {
    e.preventDefault();
    const body = { input_per_million: Number(price.input), output_per_million: Number(price.output), cached_per_million: amount(price.cached) };
    if (await state.run(() => o.prices.put(price.model.trim(), body))) setPrice({ model: "", input: "", output: "", cached: "" });
  };
  const removePrice = (model: string) => state.run(() => o.prices.remove(model));
  return (
    <div className="card" role="region" aria-label={`Settings of ${org.name}`}>
      <h2>Settings of {org.name}</h2>
      <ErrorText error={error} />
      {budget && (
        <p aria-label="This month's spending">
          {budget.month}: {money(budget.org_budget.spent_usd)} spent of {money(budget.org_budget.budget_usd)}
          {budget.org_budget.percent != null && ` (${budget.org_budget.percent.toFixed(0)} %)`}; you {money(budget.you.spent_usd)}
          {budget.you.budget_usd != null && ` of ${money(budget.you.budget_usd)}`}.
        </p>
      )}
      <form onSubmit={save} className="settings-form" aria-label={`Settings form of ${org.name}`}>
        <label>
          Default LLM profile
          <select
            value={settings.default_llm_profile ?? ""}
            disabled={!manages}
            onChange={(e) => setSettings({ ...settings, default_llm_profile: e.target.value || null })}
          >
            <option value="">The user's own</option>
            {profiles.map((p) => (
              <option key={p}>{p}</option>
            ))}
          </select>
        </label>
        <label className="check">
          <input
            type="checkbox"
            checked={settings.enforce_llm_profile}
            disabled={!manages}
            onChange={(e) => setSettings({ ...settings, enforce_llm_profile: e.target.checked })}
          />
          Members use no other profile
        </label>
        <label>
          Monthly budget (USD)
          <input inputMode="decimal" value={form.monthly} disabled={!manages} onChange={(e) => setForm({ ...form, monthly: e.target.value })} />
        </label>
        <label>
          Monthly budget per member (USD)
          <input inputMode="decimal" value={form.member} disabled={!manages} onChange={(e) => setForm({ ...form, member: e.target.value })} />
        </label>
        <label>
          Single sign-on domains
          <input placeholder="example.com" value={form.domains} disabled={!manages} onChange={(e) => setForm({ ...form, domains: e.target.value })} />
        </label>
        <label>
          Single sign-on groups
          <input placeholder="engineering" value={form.groups} disabled={!manages} onChange={(e) => setForm({ ...form, groups: e.target.value })} />
        </label>
        <label>
          Who may issue API keys
          <select
            value={settings.key_issuers}
            disabled={!manages}
            onChange={(e) => setSettings({ ...settings, key_issuers: e.target.value as Settings["key_issuers"] })}
          >
            <option value="everyone">Every member</option>
            <option value="admins">Owners and admins only</option>
          </select>
        </label>
        <label>
          Sandbox runtime of its conversations
          <select
            value={settings.sandbox_runtime ?? ""}
            disabled={!manages}
            onChange={(e) => setSettings({ ...settings, sandbox_runtime: e.target.value || null })}
          >
            <option value="">Whatever the spec says</option>
            <option value="gvisor">gVisor, always</option>
          </select>
        </label>
        <label className="check">
          <input
            type="checkbox"
            checked={settings.require_sso}
            disabled={!manages}
            onChange={(e) => setSettings({ ...settings, require_sso: e.target.checked })}
          />
          Members sign in through single sign-on only
        </label>
        {manages && <button type="submit">Save settings of {org.name}</button>}
        {saved && <span className="muted"> Saved.</span>}
      </form>
      <h3>Prices (USD per million tokens)</h3>
      <table className="admin-users" aria-label={`Prices of ${org.name}`}>
        <thead>
          <tr>
            <th>Model</th>
            <th>Input</th>
            <th>Output</th>
            <th>Cached</th>
            <th>From</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {prices.map((p) => (
            <tr key={p.model}>
              <td>{p.model}</td>
              <td>{p.input_per_million}</td>
              <td>{p.output_per_million}</td>
              <td>{p.cached_per_million ?? "—"}</td>
              <td>{p.source}</td>
              <td className="row-actions">
                {manages && p.source === "org" && (
                  <button className="ghost" onClick={() => removePrice(p.model)}>
                    Remove price of {p.model}
                  </button>
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {manages && (
        <form onSubmit={putPrice} className="inline-form" aria-label="Set a price">
          <input aria-label="Model" placeholder="gpt-4o" value={price.model} onChange={(e) => setPrice({ ...price, model: e.target.value })} required />
          <input aria-label="Input per million" inputMode="decimal" value={price.input} onChange={(e) => setPrice({ ...price, input: e.target.value })} required />
          <input aria-label="Output per million" inputMode="decimal" value={price.output} onChange={(e) => setPrice({ ...price, output: e.target.value })} required />
          <input aria-label="Cached per million" inputMode="decimal" value={price.cached} onChange={(e) => setPrice({ ...price, cached: e.target.value })} />
          <button type="submit">Set price</button>
        </form>
      )}
    </div>
  );
}
