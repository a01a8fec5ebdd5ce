//! What a conversation takes from its owner's own configuration (the `halyard_user` bucket), and
//! from its organization's when it is in one: the secrets its shell gets as environment variables
//! and its log has masked ([`halyard_platform::user_secrets`]), the LLM profile its calls go to,
//! the prices they are charged at, and the settings that bound a run. Read when a run starts, so
//! a change applies from the next run on.

use std::collections::BTreeMap;
use std::sync::Arc;

use halyard_platform::llm::fallback::{Link, LlmChain};
use halyard_platform::llm::{LlmClient, ProfileTarget};
use halyard_platform::redact::Redactor;
use halyard_platform::vault;
use halyard_protocol::UserId;
use halyard_protocol::subjects;
use halyard_protocol::user::{LlmProfile, ToolSet, UserLlmProfiles, UserSettings, org_slot_owner, parse_org_profile};
use serde::de::DeserializeOwned;

use crate::ctx::Ctx;

/// MCP servers by name.
pub type McpConfigs = BTreeMap<String, halyard_protocol::user::McpServerConfig>;

/// A user's secrets, opened: the shell's environment and the log's mask.
#[derive(Debug, Default, Clone)]
pub struct Secrets {
    pub env: BTreeMap<String, String>,
    pub redactor: Arc<Redactor>,
    /// The owner has a git provider whose forge has an API (what Halyard's own MCP tools act
    /// on).
    pub has_forge: bool,
}

async fn read<T: DeserializeOwned + Default>(ctx: &Ctx, key: &str) -> Result<T, String> {
    match ctx.user_kv.get(key).await {
        Ok(Some(bytes)) => parse(key, &bytes),
        Ok(None) => Ok(T::default()),
        Err(e) => Err(format!("{key}: {e}")),
    }
}

fn parse<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("{key}: {e}"))
}

/// Everything of the owner's a run reads as it starts (settings, LLM profiles, secrets, git
/// providers, MCP servers), read in one request to the bucket rather than one each.
pub struct Snapshot {
    owner: UserId,
    /// The organization the conversation is in, whose prices apply.
    org: Option<String>,
    values: std::collections::HashMap<String, bytes::Bytes>,
}

impl Snapshot {
    /// Reads the owner's configuration, the organization's prices when the conversation is in
    /// `org`, and its profiles when `profile` is an organization's (`@org/name`).
    pub async fn read(ctx: &Ctx, owner: &UserId, profile: Option<&str>, org: Option<&str>) -> Result<Self, String> {
        let mut keys = vec![
            subjects::user_settings_key(owner),
            subjects::user_llm_key(owner),
            subjects::user_secrets_key(owner),
            subjects::user_git_key(owner),
            subjects::user_mcp_key(owner),
        ];
        if let Some((org, _)) = profile.and_then(parse_org_profile) {
            keys.push(subjects::org_llm_key(org));
        }
        if let Some(org) = org {
            keys.push(subjects::org_price_key(org));
            keys.push(subjects::org_secrets_key(org));
            keys.push(subjects::org_mcp_key(org));
            keys.push(subjects::org_git_key(org));
        }
        let kv = &ctx.user_kv;
        let wanted: Vec<String> = keys.iter().map(|k| format!("{}{k}", kv.prefix)).collect();
        let values = halyard_platform::bus::direct_last_of(&ctx.js, &kv.stream_name, &wanted).await.map_err(|e| e.to_string())?;
        // By key, as the bucket names them.
        let values = values.into_iter().filter_map(|(subject, v)| subject.strip_prefix(&kv.prefix).map(|k| (k.to_owned(), v))).collect();
        Ok(Self { owner: owner.clone(), org: org.map(str::to_owned), values })
    }

    /// The value under `key` (the default when there is none).
    pub fn get<T: DeserializeOwned + Default>(&self, key: &str) -> Result<T, String> {
        self.values.get(key).map_or_else(|| Ok(T::default()), |v| parse(key, v))
    }

    pub fn owner(&self) -> &UserId {
        &self.owner
    }

    /// The owner's secrets, over the organization's, opened.
    pub fn secrets(&self, ctx: &Ctx) -> Result<Secrets, String> {
        let stored = self.get(&subjects::user_secrets_key(&self.owner))?;
        let git = self.get(&subjects::user_git_key(&self.owner))?;
        let mut opened = halyard_platform::user_secrets::open_stored(&ctx.vault, &self.owner, stored, git);
        if let Some(org) = &self.org {
            let org_secrets = self.get(&subjects::org_secrets_key(org))?;
            let org_git = self.get(&subjects::org_git_key(org))?;
            opened = opened.over(halyard_platform::user_secrets::open_org(&ctx.vault, org, org_secrets, org_git));
        }
        Ok(Secrets { redactor: Arc::new(opened.redactor()), env: opened.env, has_forge: opened.has_forge })
    }

    /// The MCP servers the run may connect: the operator's, the organization's, then the
    /// owner's own (each over the one before, by name); and which are the organization's, with
    /// the organization's secrets, which alone fill them.
    pub fn mcp(&self, ctx: &Ctx) -> Result<(McpConfigs, crate::tools::mcp::OrgServers), String> {
        let stored: halyard_protocol::user::UserMcpServers = self.get(&subjects::user_mcp_key(&self.owner))?;
        let Some(org) = &self.org else {
            return Ok((crate::tools::mcp::configs_of(ctx, Default::default(), stored), Default::default()));
        };
        let servers: halyard_protocol::user::UserMcpServers = self.get(&subjects::org_mcp_key(org))?;
        let names = crate::tools::mcp::org_names(&servers, &stored);
        let opened = halyard_platform::user_secrets::open_org(
            &ctx.vault,
            org,
            self.get(&subjects::org_secrets_key(org))?,
            self.get(&subjects::org_git_key(org))?,
        );
        let org_servers = crate::tools::mcp::OrgServers { names, secrets: opened.env };
        Ok((crate::tools::mcp::configs_of(ctx, servers, stored), org_servers))
    }

    pub fn settings(&self) -> Result<UserSettings, String> {
        self.get(&subjects::user_settings_key(&self.owner))
    }

    /// The owner's profile `name`, or their organization's (see [`profile`]), priced as the
    /// conversation's organization says.
    pub fn profile(&self, ctx: &Ctx, name: Option<&str>) -> Result<Profile, String> {
        let mut profile = match name {
            None => default_profile(ctx),
            Some(name) => match parse_org_profile(name) {
                Some((org, profile)) => profile_of(ctx, &UserId(org_slot_owner(org)), profile, self.get(&subjects::org_llm_key(org))?)?,
                None => profile_of(ctx, &self.owner, name, self.get(&subjects::user_llm_key(&self.owner))?)?,
            },
        };
        if let Some(org) = &self.org {
            let prices = crate::org_budget::prices_of(self.get(&subjects::org_price_key(org))?);
            profile.llm = profile.llm.with_prices(&prices);
        }
        Ok(profile)
    }
}

/// The owner's secrets (and, for the mask only, their git tokens), over those of the
/// organization `org` the conversation is in.
pub async fn secrets(ctx: &Ctx, owner: &UserId, org: Option<&str>) -> Result<Secrets, String> {
    let opened = halyard_platform::user_secrets::open(&ctx.user_kv, &ctx.vault, owner, org).await?;
    Ok(Secrets { redactor: Arc::new(opened.redactor()), env: opened.env, has_forge: opened.has_forge })
}

/// The subscription login `owner` handed to agent kind `agent`, opened (`None`: they handed it
/// none).
pub async fn agent_login(ctx: &Ctx, owner: &UserId, agent: &str) -> Result<Option<String>, String> {
    let logins: halyard_protocol::agents::AgentLogins = read(ctx, &subjects::user_agent_logins_key(owner)).await?;
    let Some(login) = logins.logins.get(agent) else { return Ok(None) };
    let slot = vault::agent_login_slot(&owner.0, agent);
    ctx.vault.open(&slot, &login.credential_sealed).map(Some).map_err(|e| format!("the login for {agent} cannot be opened: {e}"))
}

/// The owner's settings.
pub async fn settings(ctx: &Ctx, owner: &UserId) -> Result<UserSettings, String> {
    read(ctx, &subjects::user_settings_key(owner)).await
}

/// What a run takes from the owner's LLM profile.
pub struct Profile {
    /// Its client, then its fallbacks' (those that exist and can be opened).
    pub llm: LlmChain,
    /// The tools its conversations offer.
    pub tools: ToolSet,
    /// The model reads images (the browser's screenshots are sent to it).
    pub vision: bool,
}

/// The owner's profile `name` (none: the operator's default model, with the default tools).
pub async fn profile(ctx: &Ctx, owner: &UserId, name: Option<&str>) -> Result<Profile, String> {
    let Some(name) = name else { return Ok(default_profile(ctx)) };
    // An organization's profile: its key is sealed for the organization, not the owner.
    if let Some((org, profile)) = parse_org_profile(name) {
        return profile_of(ctx, &UserId(org_slot_owner(org)), profile, read(ctx, &subjects::org_llm_key(org)).await?);
    }
    profile_of(ctx, owner, name, read(ctx, &subjects::user_llm_key(owner)).await?)
}

/// The deployment's model, with the default tools.
pub fn default_profile(ctx: &Ctx) -> Profile {
    Profile { llm: LlmChain::single(ctx.llm.clone()), tools: ToolSet::default(), vision: true }
}

/// The owner's profile `name` among their `profiles`.
fn profile_of(ctx: &Ctx, owner: &UserId, name: &str, profiles: UserLlmProfiles) -> Result<Profile, String> {
    let Some(p) = profiles.profiles.get(name) else {
        return Err(format!(
            "the LLM profile `{name}` no longer exists; create it again (PUT /api/v1/llm-profiles/{name}) or switch the \
             conversation to another (PUT /api/v1/conversations/{{id}}/llm-profile)"
        ));
    };
    let primary = Link { profile: Some(name.to_owned()), client: client(ctx, owner, name, p)? };
    // A fallback that is gone or cannot be opened is passed over: the others still stand in.
    let fallbacks = p
        .fallbacks
        .iter()
        .filter_map(|f| {
            match profiles.profiles.get(f).ok_or_else(|| format!("no profile `{f}`")).and_then(|fp| client(ctx, owner, f, fp)) {
                Ok(client) => Some(Link { profile: Some(f.clone()), client }),
                Err(why) => {
                    tracing::warn!(%owner, profile = %name, fallback = %f, %why, "an LLM fallback is passed over");
                    None
                }
            }
        })
        .collect();
    Ok(Profile { llm: LlmChain::new(primary, fallbacks), tools: p.tools.clone().unwrap_or_default(), vision: p.vision.unwrap_or(true) })
}

/// The LLM client of the owner's profile `name` (`p`).
fn client(ctx: &Ctx, owner: &UserId, name: &str, p: &LlmProfile) -> Result<LlmClient, String> {
    let api_key = match &p.api_key_sealed {
        Some(sealed) => ctx
            .vault
            .open(&vault::llm_key_slot(&owner.0, name), sealed)
            .map_err(|e| format!("the API key of LLM profile `{name}` cannot be read: {e}; store it again"))?,
        None => String::new(),
    };
    ctx.llm.for_profile(ProfileTarget::of(p, api_key), &ctx.config.llm.profile_allow).map_err(|e| format!("LLM profile `{name}`: {e}"))
}
