//! One run: what a verified hook request or a claimed tick starts. The decision is made here,
//! never in the gateway that took the request, so that the gateway answers the forge at once;
//! it is recorded whatever it is (started, ignored and why, failed and why).
//!
//! Every id of a run (its own, its start task's, its conversation's, its messages') is derived
//! from what triggered it, so a command delivered twice publishes the same messages twice, which
//! the bus stores once.

use std::collections::BTreeMap;

use halyard_platform::BusError;
use halyard_platform::bus;
use halyard_protocol::automation::{Automation, AutomationCommand, AutomationRun, RunOutcome, Trigger};
use halyard_protocol::batch::{Template, Templates, templates_key};
use halyard_protocol::command::{AgentCommand, ConversationCommand};
use halyard_protocol::system::{Repository, SystemRecord};
use halyard_protocol::user::{UserGitProviders, UserSettings};
use halyard_protocol::{CommandId, ConversationId, Envelope, TaskId, UserId, subjects};
use uuid::Uuid;

use crate::ctx::Ctx;
use crate::decision::{self, clone_url, conversation_of, derived, read};
use crate::kinds::{jira, linear, slack};
use crate::prompt::{self, Fields};
use crate::{forge_runs, tracker_runs};

/// Longest title a conversation gets from its automation's name.
const MAX_TITLE_CHARS: usize = 60;

/// What a command asks of an automation.
struct Cause {
    automation_id: String,
    /// What makes this run this run (the delivery id, the tick).
    key: String,
    /// For people.
    summary: String,
    /// Tags naming it on the conversation.
    tags: BTreeMap<String, String>,
}

fn what(cmd: &AutomationCommand) -> Cause {
    match cmd {
        AutomationCommand::Hook { automation_id, delivery_id, .. } => Cause {
            automation_id: automation_id.clone(),
            key: format!("hook:{delivery_id}"),
            summary: format!("delivery {delivery_id}"),
            tags: BTreeMap::from([("delivery".to_owned(), one_line(delivery_id, 200))]),
        },
        AutomationCommand::Tick { automation_id, tick_ms } => Cause {
            automation_id: automation_id.clone(),
            key: format!("tick:{tick_ms}"),
            summary: format!("tick {}", halyard_protocol::rfc3339(*tick_ms)),
            tags: BTreeMap::from([("tick".to_owned(), halyard_protocol::rfc3339(*tick_ms))]),
        },
    }
}

fn one_line(s: &str, max: usize) -> String {
    s.chars().filter(|c| !c.is_control()).take(max).collect()
}

/// Handles one command. `Err` only where trying again may help (the bus).
pub async fn handle(ctx: &Ctx, env: Envelope<AutomationCommand>) -> Result<(), BusError> {
    let t = what(&env.payload);
    let Some(automation) = read::<Automation>(&ctx.bucket, &subjects::automation_key(&t.automation_id)).await? else {
        // Deleted since: nobody is left to show a run to.
        tracing::info!(automation_id = %t.automation_id, "a command for a deleted automation starts nothing");
        return Ok(());
    };
    let run_id = derived(&["run", &automation.id, &t.key]);
    let (automation, template) = with_template(ctx, automation).await?;
    let decided = match &template {
        Err(why) => Decision::Skip(RunOutcome::Failed, why.clone()),
        Ok(_) => decide(ctx, &automation, &env.payload).await?,
    };
    let template = template.ok().flatten();
    let mut run = AutomationRun {
        run_id: run_id.to_string(),
        automation_id: automation.id.clone(),
        owner: automation.owner.clone(),
        time_ms: halyard_platform::now_ms(),
        source: automation.trigger.kind().to_owned(),
        trigger: t.summary.clone(),
        outcome: RunOutcome::Ignored,
        conversation_id: None,
        reason: None,
    };
    match decided {
        Decision::Skip(outcome, reason) => {
            run.outcome = outcome;
            run.reason = Some(reason);
        }
        Decision::Start { message, repository, tags, runs_as, answer } => {
            let begin = Begin { message, repository, tags, runs_as, template };
            let conversation_id = start(ctx, &automation, &run_id, &t, begin).await?;
            run.outcome = RunOutcome::Started;
            run.conversation_id = Some(conversation_id);
            if let Some(answer) = answer {
                answer.on_start(ctx, &automation, conversation_id).await?;
                // A start that failed before its thread was remembered is told there now.
                crate::start_failures::check(ctx, TaskId(derived(&["task", &run_id.to_string()]))).await?;
            }
        }
        Decision::Continue { conversation_id, message, answer } => {
            let cmd = AgentCommand::UserMessage { conversation_id, text: message, images: Vec::new() };
            let env = Envelope::with_id(CommandId(derived(&["message", &run_id.to_string()])), cmd, halyard_platform::now_ms());
            bus::publish(&ctx.js, subjects::agent_command(conversation_id), &env).await?;
            run.outcome = RunOutcome::Continued;
            run.conversation_id = Some(conversation_id);
            answer.on_continue().await;
        }
    }
    tracing::info!(automation_id = %automation.id, run_id = %run.run_id, outcome = run.outcome.as_str(), reason = ?run.reason, "automation run");
    let id = CommandId(derived(&["record", &run.run_id]));
    let record = Envelope::with_id(id, SystemRecord::AutomationRun(run), halyard_platform::now_ms()).correlated(run_id.to_string());
    bus::publish(&ctx.js, subjects::automation_record(&automation.id), &record).await?;
    Ok(())
}

/// The decisions the dispatcher acts on.
pub type Decision = decision::Decision<Answer>;

/// Where a run answers: a forge's issue or pull request, a chat thread, or a tracker's issue.
pub enum Answer {
    /// Boxed: a forge client (Azure DevOps holds two APIs) outweighs the others.
    Forge(Box<forge_runs::Answer>),
    Slack(slack::SlackAnswer),
    Tracker(tracker_runs::TrackerAnswer),
}

impl Answer {
    async fn on_start(self, ctx: &Ctx, a: &Automation, conversation_id: ConversationId) -> Result<(), BusError> {
        match self {
            Self::Forge(f) => f.on_start(ctx, a, conversation_id).await,
            Self::Slack(s) => s.on_start(ctx, a, conversation_id).await,
            Self::Tracker(t) => t.on_start(ctx, a, conversation_id).await,
        }
    }

    async fn on_continue(self) {
        match self {
            Self::Forge(f) => f.on_continue().await,
            Self::Slack(s) => s.on_continue().await,
            // Trackers take no reactions: the run record and the next summary say it was heard.
            Self::Tracker(_) => {}
        }
    }
}

async fn decide(ctx: &Ctx, a: &Automation, cmd: &AutomationCommand) -> Result<Decision, BusError> {
    if !a.enabled {
        return Ok(Decision::Skip(RunOutcome::Ignored, "the automation is disabled".into()));
    }
    let fields = match (&a.trigger, cmd) {
        (Trigger::Webhook {}, AutomationCommand::Hook { body, .. }) => match serde_json::from_str::<serde_json::Value>(body) {
            Ok(payload) => Fields::of_json(&payload),
            Err(e) => return Ok(Decision::Skip(RunOutcome::Ignored, format!("the request's body is not JSON ({e})"))),
        },
        (Trigger::Schedule { .. }, AutomationCommand::Tick { .. }) => Fields::default(),
        (Trigger::Github { provider, label, mention }, AutomationCommand::Hook { event, body, .. }) => {
            let event = event.as_deref().unwrap_or_default();
            return forge_runs::decide(ctx, a, forge_runs::Kind::Github, provider, label, mention, event, body)
                .await
                .map(|d| d.map_answer(|a| Answer::Forge(Box::new(a))));
        }
        (Trigger::Jira { api_url, email, projects, provider, label, mention }, AutomationCommand::Hook { body, .. }) => {
            let payload = match serde_json::from_str::<serde_json::Value>(body) {
                Ok(p) => p,
                Err(e) => return Ok(Decision::Skip(RunOutcome::Ignored, format!("the request's body is not JSON ({e})"))),
            };
            let ask = jira::read_ask(&payload, api_url, label, mention);
            let client = jira::client(ctx, a, api_url, email).map(tracker_runs::Client::Jira);
            return tracker_runs::decide(ctx, a, &payload, ask, projects, provider.as_deref(), client)
                .await
                .map(|d| d.map_answer(Answer::Tracker));
        }
        (Trigger::Linear { teams, provider, api_url, label, mention }, AutomationCommand::Hook { body, .. }) => {
            let payload = match serde_json::from_str::<serde_json::Value>(body) {
                Ok(p) => p,
                Err(e) => return Ok(Decision::Skip(RunOutcome::Ignored, format!("the request's body is not JSON ({e})"))),
            };
            let ask = linear::read_ask(&payload, label, mention);
            let client = linear::client(ctx, a, api_url.as_deref()).map(tracker_runs::Client::Linear);
            return tracker_runs::decide(ctx, a, &payload, ask, teams, provider.as_deref(), client)
                .await
                .map(|d| d.map_answer(Answer::Tracker));
        }
        (Trigger::Slack { channels, users, provider, api_url, consented }, AutomationCommand::Hook { body, .. }) => {
            let who = slack::Who { users, consented };
            return slack::decide(ctx, a, channels, who, provider.as_deref(), api_url.as_deref(), body)
                .await
                .map(|d| d.map_answer(Answer::Slack));
        }
        (Trigger::AzureDevops { provider, mention }, AutomationCommand::Hook { event, body, .. }) => {
            let event = event.as_deref().unwrap_or_default();
            return forge_runs::decide(ctx, a, forge_runs::Kind::AzureDevops, provider, "", mention, event, body)
                .await
                .map(|d| d.map_answer(|a| Answer::Forge(Box::new(a))));
        }
        (Trigger::Bitbucket { provider, mention }, AutomationCommand::Hook { event, body, .. }) => {
            let event = event.as_deref().unwrap_or_default();
            return forge_runs::decide(ctx, a, forge_runs::Kind::Bitbucket, provider, "", mention, event, body)
                .await
                .map(|d| d.map_answer(|a| Answer::Forge(Box::new(a))));
        }
        (Trigger::Forgejo { provider, label, mention }, AutomationCommand::Hook { event, body, .. }) => {
            let event = event.as_deref().unwrap_or_default();
            return forge_runs::decide(ctx, a, forge_runs::Kind::Forgejo, provider, label, mention, event, body)
                .await
                .map(|d| d.map_answer(|a| Answer::Forge(Box::new(a))));
        }
        (Trigger::Gitlab { provider, label, mention }, AutomationCommand::Hook { event, body, .. }) => {
            let event = event.as_deref().unwrap_or_default();
            return forge_runs::decide(ctx, a, forge_runs::Kind::Gitlab, provider, label, mention, event, body)
                .await
                .map(|d| d.map_answer(|a| Answer::Forge(Box::new(a))));
        }
        (trigger, _) => {
            return Ok(Decision::Skip(RunOutcome::Ignored, format!("a {} automation does not take this kind of request", trigger.kind())));
        }
    };
    let template = a.prompt.as_deref().unwrap_or_else(|| prompt::default_template(a.trigger.kind()));
    let message = prompt::render(template, &fields);
    let repository = match &a.repository {
        None => None,
        Some(r) => {
            let git: UserGitProviders = read(&ctx.user_kv, &subjects::user_git_key(&a.owner)).await?.unwrap_or_default();
            let Some(provider) = git.providers.get(&r.provider) else {
                return Ok(Decision::Skip(
                    RunOutcome::Failed,
                    format!("the git provider {:?} no longer exists; add it again or edit the automation's repository", r.provider),
                ));
            };
            Some(Repository { url: clone_url(provider, &r.full_name), branch: r.branch.clone() })
        }
    };
    Ok(Decision::Start { message, repository, tags: BTreeMap::new(), runs_as: None, answer: None })
}

/// The automation's template (`Err`: it names one its owner no longer has, said in words), and
/// the automation with the template's message as its `prompt` where it has none. Not for Slack:
/// a run as someone else (a linked Slack user) has the prompt they agreed to, and the
/// template's checks and choices are not applied to it either ([`start`]).
async fn with_template(ctx: &Ctx, mut a: Automation) -> Result<(Automation, Result<Option<Template>, String>), BusError> {
    let Some(name) = a.template.clone() else { return Ok((a, Ok(None))) };
    let mine: Templates = read(&ctx.user_kv, &templates_key(&a.owner)).await?.unwrap_or_default();
    let Some(t) = mine.templates.get(&name).cloned() else {
        return Ok((a, Err(format!("its template {name:?} no longer exists; create it again or edit the automation"))));
    };
    if a.prompt.is_none() && !matches!(a.trigger, Trigger::Slack { .. }) {
        a.prompt = Some(t.item.message.clone());
    }
    Ok((a, Ok(Some(t))))
}

/// What a run's conversation starts with.
struct Begin {
    message: String,
    repository: Option<Repository>,
    tags: BTreeMap<String, String>,
    runs_as: Option<UserId>,
    /// The automation's template, if it names one.
    template: Option<Template>,
}

/// Sends the start of the run's conversation to the conversation manager, with its user's
/// defaults as a start from the API would have them (the automation's LLM profile is its
/// owner's, so it applies only to conversations that run as the owner).
async fn start(ctx: &Ctx, a: &Automation, run_id: &Uuid, t: &Cause, begin: Begin) -> Result<ConversationId, BusError> {
    let run = run_id.to_string();
    let task_id = TaskId(derived(&["task", &run]));
    let conversation_id = conversation_of(run_id);
    let owner = begin.runs_as.unwrap_or_else(|| a.owner.clone());
    let settings: UserSettings = read(&ctx.user_kv, &subjects::user_settings_key(&owner)).await?.unwrap_or_default();
    // (The automation's choices are its owner's: a run as someone else has theirs.)
    let template = begin.template.filter(|_| owner == a.owner);
    let item = template.as_ref().map(|t| &t.item);
    let (profile, agent) = match owner == a.owner {
        true => {
            let profile = a.llm_profile.clone().or_else(|| item.and_then(|i| i.llm_profile.clone())).or(settings.llm_profile);
            (profile, a.agent.clone().or(settings.agent))
        }
        false => (settings.llm_profile, settings.agent),
    };
    let spec = item.and_then(|i| i.sandbox_spec.clone()).or(settings.sandbox_spec);
    // Checks are for Halyard's own agent: a third-party one finishes its turns itself.
    let own_agent = agent.as_deref().is_none_or(|a| a == halyard_protocol::agents::HALYARD);
    let checks = template.as_ref().and_then(|t| t.checks.clone()).filter(|_| own_agent);
    let mut tags = t.tags.clone();
    tags.extend(begin.tags);
    tags.insert("automation".into(), a.id.clone());
    tags.insert("source".into(), a.trigger.kind().to_owned());
    let now = halyard_platform::now_ms();
    let cmd = ConversationCommand::Start {
        agent,
        task_id,
        conversation_id,
        owner,
        message: Some(begin.message),
        repository: begin.repository,
        title: Some(a.name.chars().take(MAX_TITLE_CHARS).collect()),
        created_ms: now,
        spec: spec.filter(|s| ctx.config.sandbox.spec(s).is_some()),
        budget: settings.budget,
        confirmation_policy: settings.confirmation_policy,
        llm_profile: profile,
        secrets: None,
        fork: None,
        parent: None,
        tags,
        org: None,
        visibility: Default::default(),
        // Behind the owner's interactive starts when sandboxes are short.
        queue: halyard_protocol::queue::QueueTerms {
            class: halyard_protocol::queue::StartClass::Automation,
            asked_us: Some(halyard_platform::now_us()),
            ..Default::default()
        },
        // The template's, else the deployment's default environment, if it has one.
        environment: item.and_then(|i| i.environment.clone()),
        checks,
        // Resolved at its start, like any conversation's.
        plugins: None,
    };
    let env = Envelope::with_id(CommandId(derived(&["start", &run])), cmd, now).correlated(task_id.to_string());
    bus::publish(&ctx.js, subjects::conversation_command(conversation_id), &env).await?;
    Ok(conversation_id)
}

#[cfg(test)]
mod tests {
    #[test]
    fn derived_ids_are_stable_and_distinct() {
        let a = super::derived(&["run", "x", "hook:1"]);
        assert_eq!(a, super::derived(&["run", "x", "hook:1"]));
        assert_ne!(a, super::derived(&["run", "x", "hook:2"]));
        assert_ne!(super::derived(&["ab", "c"]), super::derived(&["a", "bc"]));
        assert_eq!(a.get_version_num(), 8);
    }
}
