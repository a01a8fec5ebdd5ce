//! The callback dispatcher: delivers conversation events to users' webhooks, signed per the
//! Standard Webhooks specification, at least once and in order per subscription and conversation.
//!
//! Two stages, both on the bus so that a restart loses nothing:
//! 1. *Fan-out* ([`fanout`]): a durable consumer of every event turns each one that matches
//!    a subscription into a [`DeliveryJob`] on `halyard.dlv.<webhook>.<lane>.<conversation>`
//!    (de-duplicated by a delivery id derived from webhook and event; the lane is fixed per
//!    conversation, [`subjects::delivery_lane`]).
//! 2. *Delivery* ([`worker`]): one worker per enabled subscription, with a durable consumer
//!    per lane, each with one message in flight. The server hands a lane its next job only
//!    once the current one is settled, so order holds per conversation, and a retry is a
//!    delayed NAK: the schedule lives in JetStream, not in memory. The lanes deliver side by
//!    side, so one endpoint that receives every conversation is not held to one request at a
//!    time; a slow or dead endpoint holds up only its own worker.
//!
//! A [`Dispatcher`] actor keeps the workers in line with the subscriptions in the key-value
//! bucket (which it watches), and the fan-out's consumer too: it takes no events while no
//! subscription is enabled ([`fanout::follow`]).

pub mod ctx;
pub mod fanout;
pub mod worker;

use crate::ctx::Ctx;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use async_nats::jetstream;
use futures::StreamExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};

use halyard_platform::{BusError, Config, Shutdown};
use halyard_protocol::subjects;
use halyard_protocol::webhook::WebhookSubscription;

/// Why the dispatcher failed.
#[derive(Debug, thiserror::Error)]
pub enum CallbackError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("cannot start the callback dispatcher: {0}")]
    Setup(String),
}

impl CallbackError {
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Bus(e) => e.is_retryable(),
            Self::Setup(_) => false,
        }
    }
}

/// Messages of the dispatcher.
pub enum DispatcherMsg {
    Upsert(WebhookSubscription),
    Remove(String),
    /// Every subscription stored at start-up was sent before this: the fan-out's filter may be
    /// set now (not earlier, when a subscription not yet loaded would lose events).
    Loaded,
    /// Time to look at the fan-out's filter again ([`fanout::FOLLOW_EVERY`]).
    Look,
}

/// Keeps one worker per enabled subscription.
pub struct Dispatcher;

pub struct DispatcherState {
    ctx: Arc<Ctx>,
    workers: HashMap<String, tokio::task::JoinHandle<()>>,
    /// Since when no subscription has been enabled, as this dispatcher saw it (`None`: one is).
    none_since: Option<std::time::Instant>,
    /// The fan-out's filter as this dispatcher last set or found it (true: every event).
    applied: Option<bool>,
}

impl Actor for Dispatcher {
    type Msg = DispatcherMsg;
    type State = DispatcherState;
    type Arguments = Arc<Ctx>;

    async fn pre_start(&self, _myself: ActorRef<Self::Msg>, ctx: Arc<Ctx>) -> Result<Self::State, ActorProcessingErr> {
        Ok(DispatcherState { ctx, workers: HashMap::new(), none_since: None, applied: None })
    }

    async fn handle(&self, _myself: ActorRef<Self::Msg>, msg: Self::Msg, st: &mut Self::State) -> Result<(), ActorProcessingErr> {
        // Workers that ended (disabled by themselves, or failed) are dropped first.
        st.workers.retain(|_, h| !h.is_finished());
        let started = matches!(msg, DispatcherMsg::Loaded);
        // A periodic look asks the server again; a change asks only if this dispatcher's wish
        // changed (a hundred subscriptions made at once are not held up by a hundred looks).
        if matches!(msg, DispatcherMsg::Look) {
            st.applied = None;
        }
        match msg {
            DispatcherMsg::Upsert(sub) => {
                let id = sub.id.clone();
                let enabled = sub.enabled;
                if let Ok(mut subs) = st.ctx.subs.write() {
                    subs.insert(id.clone(), sub);
                }
                if enabled && !st.workers.contains_key(&id) {
                    let handle = tokio::spawn(worker::run(st.ctx.clone(), id.clone()));
                    st.workers.insert(id, handle);
                } else if !enabled {
                    if let Some(h) = st.workers.remove(&id) {
                        h.abort();
                    }
                }
            }
            DispatcherMsg::Remove(id) => {
                if let Ok(mut subs) = st.ctx.subs.write() {
                    subs.remove(&id);
                }
                if let Some(h) = st.workers.remove(&id) {
                    h.abort();
                }
                // Its pending jobs go with it.
                if let Ok(stream) = st.ctx.js.get_stream_no_info(subjects::DELIVERIES_STREAM).await {
                    for lane in 0..subjects::DELIVERY_LANES {
                        let _ = stream.delete_consumer(&worker::consumer_name(&id, lane)).await;
                    }
                    let _ = stream.purge().filter(subjects::delivery_jobs_of(&id)).await;
                }
            }
            DispatcherMsg::Loaded | DispatcherMsg::Look => {}
        }
        // Every look at the filter is made here, one at a time and in the order the
        // subscriptions changed. Events are taken at once when a subscription is enabled; they
        // stop only once none has been for a while, or at start-up, whose view is the bucket's.
        let enabled = fanout::any_enabled(&st.ctx);
        let none_since = if enabled { None } else { Some(*st.none_since.get_or_insert_with(std::time::Instant::now)) };
        st.none_since = none_since;
        let idle = std::time::Duration::from_secs(st.ctx.config.webhooks.fanout_idle_secs);
        let want = if enabled {
            true
        } else if started || none_since.is_some_and(|t| t.elapsed() >= idle) {
            false
        } else {
            return Ok(());
        };
        if st.applied != Some(want) {
            st.applied = fanout::follow(&st.ctx, want).await.then_some(want);
        }
        Ok(())
    }

    async fn post_stop(&self, _myself: ActorRef<Self::Msg>, st: &mut Self::State) -> Result<(), ActorProcessingErr> {
        for (_, h) in st.workers.drain() {
            h.abort();
        }
        Ok(())
    }
}

/// Serves until `shutdown`.
pub async fn run(config: Arc<Config>, nats: async_nats::Client, shutdown: Shutdown) -> Result<(), CallbackError> {
    let js = jetstream::new(nats);
    let webhooks = js.get_key_value(subjects::WEBHOOK_BUCKET).await.map_err(|e| CallbackError::Setup(e.to_string()))?;
    // Every address checked where it is connected to (no second lookup, no redirect).
    let http = halyard_platform::outbound::builder(&config.webhooks.allow)
        .timeout(std::time::Duration::from_secs(config.webhooks.timeout_secs))
        .build()
        .map_err(|e| CallbackError::Setup(e.to_string()))?;
    let ctx = Arc::new(Ctx { config, js: js.clone(), http, webhooks: webhooks.clone(), subs: RwLock::new(HashMap::new()) });
    let (dispatcher, handle) = Actor::spawn(None, Dispatcher, ctx.clone()).await.map_err(|e| CallbackError::Setup(e.to_string()))?;

    // Watch first, then load, so no change falls between the two.
    let mut watch = webhooks.watch_all().await.map_err(|e| CallbackError::Setup(e.to_string()))?;
    let mut keys = webhooks.keys().await.map_err(|e| CallbackError::Setup(e.to_string()))?;
    while let Some(Ok(key)) = keys.next().await {
        if let Ok(Some(v)) = webhooks.get(&key).await {
            if let Ok(sub) = serde_json::from_slice::<WebhookSubscription>(&v) {
                let _ = dispatcher.send_message(DispatcherMsg::Upsert(sub));
            }
        }
    }
    let _ = dispatcher.send_message(DispatcherMsg::Loaded);
    let watcher = {
        let dispatcher = dispatcher.clone();
        tokio::spawn(async move {
            while let Some(Ok(entry)) = watch.next().await {
                let msg = match entry.operation {
                    async_nats::jetstream::kv::Operation::Put => match serde_json::from_slice::<WebhookSubscription>(&entry.value) {
                        Ok(sub) => DispatcherMsg::Upsert(sub),
                        Err(e) => {
                            tracing::error!(key = %entry.key, error = %e, "undecodable webhook subscription");
                            continue;
                        }
                    },
                    _ => DispatcherMsg::Remove(entry.key.clone()),
                };
                let _ = dispatcher.send_message(msg);
            }
        })
    };

    let looker = {
        let dispatcher = dispatcher.clone();
        let every = fanout::FOLLOW_EVERY.min(std::time::Duration::from_secs(ctx.config.webhooks.fanout_idle_secs.max(1)));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if dispatcher.send_message(DispatcherMsg::Look).is_err() {
                    return;
                }
            }
        })
    };
    let result = fanout::run(ctx, shutdown).await;
    looker.abort();
    watcher.abort();
    dispatcher.stop(None);
    let _ = handle.await;
    result.map_err(CallbackError::from)
}
