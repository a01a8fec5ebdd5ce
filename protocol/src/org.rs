//! Organizations: a team of users with roles. Stored as `org.<name>` in the accounts bucket
//! (`halyard_auth`), which every gateway follows, so a membership change is known everywhere as
//! soon as it reaches each gateway.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::UnixMillis;
use crate::envelope::Payload;
use crate::ids::UserId;

/// What a member may do in an organization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Uses what the organization offers.
    Member,
    /// Also adds and removes members and sets the organization's settings.
    Admin,
    /// Also changes roles; an organization always keeps at least one.
    Owner,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Member => "member",
            Self::Admin => "admin",
            Self::Owner => "owner",
        }
    }

    /// Whether the role manages members and settings (owners and admins).
    pub fn manages(self) -> bool {
        self >= Self::Admin
    }
}

/// Who reads a conversation besides its owner.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Visibility {
    /// Its owner only.
    #[default]
    Private,
    /// Also the members of the organization it was started in: read-only, live.
    Org,
}

impl Visibility {
    pub fn is_private(&self) -> bool {
        *self == Self::Private
    }
}

/// One organization and its members.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Org {
    /// Letters, digits, `-` and `_`; how the API names it.
    pub name: String,
    pub members: BTreeMap<UserId, Role>,
    pub created_by: UserId,
    pub created_ms: UnixMillis,
    pub updated_ms: UnixMillis,
    #[serde(default)]
    pub settings: OrgSettings,
    /// Users who left or were removed: joining by e-mail domain or group does not add them back
    /// (an invitation they accept does).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub left: BTreeSet<UserId>,
    /// Invitations not yet answered, by invitee: nobody is a member without saying yes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub invitations: BTreeMap<UserId, Invitation>,
}

/// An invitation to join an organization.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invitation {
    /// The role the invitee gets on accepting.
    pub role: Role,
    pub invited_by: UserId,
    pub invited_ms: UnixMillis,
}

/// What an organization's owners and admins set for its conversations.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OrgSettings {
    /// The organization's LLM profile its conversations use when they name none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_llm_profile: Option<String>,
    /// Its conversations may use no other profile.
    #[serde(default)]
    pub enforce_llm_profile: bool,
    /// Its members sign in to the web app only through the identity provider.
    #[serde(default)]
    pub require_sso: bool,
    /// Users who sign in through the identity provider with an e-mail address at one of these
    /// domains become members.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sso_domains: Vec<String>,
    /// Users whose identity provider's `groups` claim names one of these become members.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sso_groups: Vec<String>,
    /// What its conversations may spend on LLM calls in a calendar month (UTC), in US dollars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monthly_budget_usd: Option<f64>,
    /// What each member's conversations in it may spend in a month.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_monthly_budget_usd: Option<f64>,
    /// Who of its members may issue API keys of their own.
    #[serde(default, skip_serializing_if = "KeyIssuers::is_everyone")]
    pub key_issuers: KeyIssuers,
    /// The container runtime every conversation in it runs under (`gvisor`): a start naming a
    /// spec of another is refused; one naming none gets the operator's first spec with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_runtime: Option<String>,
    /// What every sandbox of its conversations may reach by name, enforced over its members'
    /// environments (a name must be allowed by both; either's deny wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<crate::egress::EgressPolicy>,
}

/// Who of an organization's members may issue API keys of their own (`POST /me/keys`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum KeyIssuers {
    #[default]
    Everyone,
    /// Its owners and admins only: a member signs in (through single sign-on, where it is
    /// required) and asks them, or an operator, for a key.
    Admins,
}

impl KeyIssuers {
    pub fn is_everyone(&self) -> bool {
        *self == Self::Everyone
    }
}

impl OrgSettings {
    /// The budgets, as the agent runner reads them.
    pub fn budget(&self) -> OrgBudget {
        OrgBudget { monthly_budget_usd: self.monthly_budget_usd, member_monthly_budget_usd: self.member_monthly_budget_usd }
    }
}

/// One model's price in US dollars per million tokens, as an organization sets it
/// (`PUT /orgs/{org}/prices/{model}`) over the built-in table.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelPrice {
    pub input_per_million: f64,
    pub output_per_million: f64,
    /// Prompt tokens served from the provider's cache (the input price if absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_per_million: Option<f64>,
}

/// An organization's skills by name (`orgskills.<org>` in the user bucket).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OrgSkills {
    #[serde(default)]
    pub skills: BTreeMap<String, crate::event::Skill>,
}

/// An organization's prices by model (`orgprice.<org>` in the user bucket).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OrgPrices {
    #[serde(default)]
    pub prices: BTreeMap<String, ModelPrice>,
}

/// An organization's members (`orgmembers.<org>` in the user bucket), copied from the accounts
/// bucket on every change of membership: a run in the organization whose owner is not among
/// them gets nothing of the organization's and stops.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrgMembers {
    pub members: BTreeSet<UserId>,
}

/// An organization's monthly budgets (`orgbudget.<org>` in the user bucket), copied from its
/// settings for the agent runner, which checks them before every LLM call.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OrgBudget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monthly_budget_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_monthly_budget_usd: Option<f64>,
}

/// The shares of a budget at which an alert is given, once each a month.
pub const ALERT_PERCENTS: [u8; 3] = [80, 90, 100];

/// What an organization's conversations spent in one month (`orgspend.<org>.<YYYY-MM>` in the
/// user bucket): added to by the agent runner after each priced LLM call, with an expected
/// revision, so concurrent runs never lose each other's spending.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OrgSpend {
    #[serde(default)]
    pub total_usd: f64,
    /// By member.
    #[serde(default)]
    pub members: BTreeMap<UserId, f64>,
    /// The highest alert given so far, by budget: `org` for the organization's, the user id for
    /// a member's.
    #[serde(default)]
    pub alerted: BTreeMap<String, u8>,
}

/// A budget passed a share ([`ALERT_PERCENTS`]).
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetCrossing {
    /// The member whose budget it is (absent: the organization's).
    pub user: Option<UserId>,
    pub percent: u8,
    pub spent_usd: f64,
    pub budget_usd: f64,
}

/// A budget that is spent.
#[derive(Clone, Debug, PartialEq)]
pub struct Exhausted {
    pub user: Option<UserId>,
    pub spent_usd: f64,
    pub budget_usd: f64,
}

impl Exhausted {
    /// What a refused run or start tells the user.
    pub fn message(&self, org: &str) -> String {
        let whose = match &self.user {
            Some(u) => format!("{u}'s monthly budget in organization {org}"),
            None => format!("organization {org}'s monthly budget"),
        };
        format!(
            "{whose} of ${:.2} is spent (${:.2} this month): no LLM call is made until next month or until an owner or admin \
             raises it (PUT /api/v1/orgs/{org}/settings)",
            self.budget_usd, self.spent_usd
        )
    }
}

impl OrgSpend {
    /// What `user` spent.
    pub fn of(&self, user: &UserId) -> f64 {
        self.members.get(user).copied().unwrap_or(0.0)
    }

    /// Adds `usd` that `user`'s conversation spent; the alerts now due, each given once.
    pub fn add(&mut self, user: &UserId, usd: f64, budget: &OrgBudget) -> Vec<BudgetCrossing> {
        self.total_usd += usd;
        *self.members.entry(user.clone()).or_default() += usd;
        let mut due = Vec::new();
        let scopes = [
            ("org".to_owned(), None, self.total_usd, budget.monthly_budget_usd),
            (user.0.clone(), Some(user.clone()), self.of(user), budget.member_monthly_budget_usd),
        ];
        for (key, who, spent, limit) in scopes {
            let Some(limit) = limit else { continue };
            let given = self.alerted.get(&key).copied().unwrap_or(0);
            let reached =
                ALERT_PERCENTS.iter().copied().filter(|p| spent >= limit * f64::from(*p) / 100.0 && *p > given).collect::<Vec<_>>();
            if let Some(top) = reached.last() {
                self.alerted.insert(key, *top);
            }
            due.extend(reached.into_iter().map(|percent| BudgetCrossing {
                user: who.clone(),
                percent,
                spent_usd: spent,
                budget_usd: limit,
            }));
        }
        due
    }

    /// Why `user`'s conversations in the organization may make no further LLM call this month.
    pub fn exhausted(&self, user: &UserId, budget: &OrgBudget) -> Option<Exhausted> {
        if let Some(limit) = budget.monthly_budget_usd.filter(|l| self.total_usd >= *l) {
            return Some(Exhausted { user: None, spent_usd: self.total_usd, budget_usd: limit });
        }
        let spent = self.of(user);
        budget.member_monthly_budget_usd.filter(|l| spent >= *l).map(|limit| Exhausted {
            user: Some(user.clone()),
            spent_usd: spent,
            budget_usd: limit,
        })
    }
}

/// The budget month of `ms`: `YYYY-MM`, UTC.
pub fn budget_month(ms: UnixMillis) -> String {
    crate::rfc3339(ms)[..7].to_owned()
}

impl Org {
    /// `user`'s role, if a member.
    pub fn role_of(&self, user: &UserId) -> Option<Role> {
        self.members.get(user).copied()
    }

    /// How many owners it has.
    pub fn owners(&self) -> usize {
        self.members.values().filter(|r| **r == Role::Owner).count()
    }
}

impl Payload for Org {
    fn kind(&self) -> String {
        "auth.org".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_order_and_manage() {
        assert!(Role::Owner > Role::Admin && Role::Admin > Role::Member);
        assert!(Role::Owner.manages() && Role::Admin.manages() && !Role::Member.manages());
        assert_eq!(serde_json::to_string(&Role::Admin).unwrap_or_default(), "\"admin\"");
    }

    #[test]
    fn each_alert_is_given_once_and_a_spent_budget_stops_spending() {
        let (alice, bob) = (UserId("alice".into()), UserId("bob".into()));
        let budget = OrgBudget { monthly_budget_usd: Some(10.0), member_monthly_budget_usd: Some(5.0) };
        let mut spend = OrgSpend::default();
        assert!(spend.add(&alice, 3.0, &budget).is_empty());
        let due = spend.add(&alice, 1.5, &budget);
        assert_eq!(due.iter().map(|c| (c.user.is_some(), c.percent)).collect::<Vec<_>>(), vec![(true, 80), (true, 90)]);
        assert!(spend.add(&alice, 0.1, &budget).is_empty(), "given once");
        assert!(spend.exhausted(&alice, &budget).is_none() && spend.exhausted(&bob, &budget).is_none());
        let due = spend.add(&bob, 4.0, &budget);
        assert_eq!(due.iter().map(|c| (c.user.clone(), c.percent)).collect::<Vec<_>>(), vec![(None, 80), (Some(bob.clone()), 80)]);
        assert!(spend.add(&alice, 0.5, &budget).iter().any(|c| c.user.is_none() && c.percent == 90));
        assert_eq!(spend.exhausted(&alice, &budget).map(|e| e.user), Some(Some(alice.clone())), "her 5.1 of 5");
        assert!(spend.exhausted(&bob, &budget).is_none());
        spend.add(&bob, 1.0, &budget);
        let e = spend.exhausted(&bob, &budget).expect("the organization's 10.1 of 10");
        assert_eq!(e.user, None);
        assert!(e.message("acme").contains("organization acme's monthly budget of $10.00"), "{}", e.message("acme"));
        assert_eq!(budget_month(0), "1970-01");
    }
}
