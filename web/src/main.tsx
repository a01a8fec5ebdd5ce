// The web workspace: signs in with an API key (exchanged for an HttpOnly session cookie; the key
// is not kept), then the conversations, one conversation, automations, webhooks and sandboxes.

import { StrictMode, useCallback, useEffect, useState } from "react";
import { createRoot } from "react-dom/client";
import "./styles.css";
import { api, setSignedOutHandler } from "./api";
import { prefetchFromPath } from "./prefetch";
import type { Me } from "./types";
import { Link, navigate, usePath } from "./router";
import { SignIn } from "./pages/SignIn";
import { ConversationList } from "./pages/ConversationList";
import { NewConversation } from "./pages/NewConversation";
import { ConversationRoute } from "./pages/OrgConversation";
import { Webhooks } from "./pages/Webhooks";
import { Automations } from "./pages/Automations";
import { Sandboxes } from "./pages/Sandboxes";
import { Environments } from "./pages/Environments";
import { Plugins } from "./pages/Plugins";
import { BatchPage, Batches } from "./pages/Batches";
import { Settings } from "./pages/Settings";
import { Admin } from "./pages/Admin";
import { Queue } from "./pages/Queue";
import { Audit } from "./pages/Audit";
import { Orgs } from "./pages/Orgs";
import { Usage } from "./pages/Usage";
import { SharedConversation } from "./pages/SharedConversation";
import { SlackLink } from "./pages/SlackLink";
import { BudgetBanner } from "./components/BudgetBanner";

type Theme = "light" | "dark";

function initialTheme(): Theme {
  const saved = localStorage.getItem("halyard-theme");
  if (saved === "light" || saved === "dark") return saved;
  return matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
}

function App() {
  const [me, setMe] = useState<Me | null | undefined>(undefined);
  const [theme, setTheme] = useState<Theme>(initialTheme);
  const path = usePath();

  useEffect(() => {
    document.documentElement.dataset.theme = theme;
    localStorage.setItem("halyard-theme", theme);
  }, [theme]);

  const refresh = useCallback(() => {
    api.me().then(setMe, () => setMe(null));
  }, []);
  useEffect(() => {
    setSignedOutHandler(() => setMe(null));
    // A share link's reader has no account to ask about.
    if (!location.pathname.startsWith("/shared/")) refresh();
  }, [refresh]);

  // A share link opens without an account (and without asking who one is).
  const shared = path.split("?")[0].match(/^\/shared\/([0-9a-f-]{36}\.[0-9a-f]{64})$/);
  if (shared) return <SharedConversation token={shared[1]} />;
  if (me === undefined) return <div className="splash">Halyard</div>;
  if (me === null) return <SignIn onSignedIn={refresh} />;

  const signOut = async () => {
    try {
      await api.signOut();
    } finally {
      setMe(null);
      navigate("/", true);
    }
  };

  const pathname = path.split("?")[0];
  const conv = pathname.match(/^\/c\/([0-9a-f-]{36})$/);
  const slackLink = pathname.match(/^\/link\/slack\/([0-9a-f]{64})$/);
  const batch = pathname.match(/^\/batches\/([0-9a-f-]{36})$/);
  let page;
  if (conv) page = <ConversationRoute key={conv[1]} id={conv[1]} me={me.user} />;
  else if (slackLink) page = <SlackLink code={slackLink[1]} me={me.user} />;
  else if (pathname === "/new") page = <NewConversation />;
  else if (pathname === "/webhooks") page = <Webhooks />;
  else if (pathname === "/automations") page = <Automations me={me.user} />;
  else if (pathname === "/sandboxes") page = <Sandboxes />;
  else if (pathname === "/environments") page = <Environments />;
  else if (pathname === "/plugins") page = <Plugins admin={me.admin} />;
  else if (pathname === "/batches") page = <Batches />;
  else if (batch) page = <BatchPage key={batch[1]} id={batch[1]} />;
  else if (pathname === "/settings") page = <Settings />;
  else if (pathname === "/admin" && me.admin) page = <Admin />;
  else if (pathname === "/audit" && me.admin) page = <Audit />;
  else if (pathname === "/queue" && me.admin) page = <Queue />;
  else if (pathname === "/orgs") page = <Orgs me={me.user} />;
  else if (pathname === "/usage") page = <Usage admin={me.admin} />;
  else page = <ConversationList />;

  const nav = (href: string, label: string) => (
    <Link href={href} aria-current={pathname === href ? "page" : undefined}>
      {label}
    </Link>
  );
  return (
    <div className="app">
      <header className="topbar">
        <Link href="/" className="brand">
          Halyard
        </Link>
        <nav aria-label="Main">
          {nav("/", "Conversations")}
          {nav("/automations", "Automations")}
          {nav("/webhooks", "Webhooks")}
          {nav("/sandboxes", "Sandboxes")}
          {nav("/environments", "Environments")}
          {nav("/plugins", "Plugins")}
          {nav("/batches", "Batches")}
          {nav("/orgs", "Organizations")}
          {nav("/usage", "Usage")}
          {nav("/settings", "Settings")}
          {me.admin && nav("/admin", "Users")}
          {me.admin && nav("/audit", "Audit")}
          {me.admin && nav("/queue", "Queue")}
        </nav>
        <span className="spacer" />
        <button
          className="ghost"
          onClick={() => setTheme(theme === "dark" ? "light" : "dark")}
          aria-label={`Switch to ${theme === "dark" ? "light" : "dark"} theme`}
        >
          {theme === "dark" ? "☀" : "☾"}
        </button>
        <span className="who" title="Signed in as">
          {me.user}
        </span>
        <button className="ghost" onClick={signOut}>
          Sign out
        </button>
      </header>
      <BudgetBanner path={pathname} />
      <main>{page}</main>
    </div>
  );
}

prefetchFromPath(location.pathname);
createRoot(document.getElementById("root")!).render(
  <StrictMode>
    <App />
  </StrictMode>,
);
