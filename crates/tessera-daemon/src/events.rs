//! The event log: what the daemon did, one info-level log line per event (job started,
//! finished, preempted with its reason, GPU reconfigured, service instance scaled), and the
//! most recent events in a bounded ring buffer for `GET /v1/events` and the dashboard.
//!
//! The core calls [`EventLog`]'s `record_*` hooks where it applies a decision or a backend's
//! answer; nothing here decides anything, and nothing here is persisted (a restart starts
//! with an empty buffer; the store keeps every job's transitions).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::types::JobState;

/// Events kept in memory (the oldest are dropped first).
pub const EVENT_CAPACITY: usize = 1000;

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EventKind {
    /// A job's run was submitted to the backend on its allocation.
    Started,
    /// A job completed, failed or was cancelled.
    Finished,
    /// A running (or starting) job was stopped and requeued: by the policy, the backend, a
    /// node failure, a restart.
    Preempted,
    /// A GPU's MIG layout changed (or the change was declined or failed).
    Reconfigured,
    /// A service got a new instance.
    ScaledOut,
    /// A service instance was removed.
    ScaledIn,
}

impl EventKind {
    /// Lower-case name, as logged.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Started => "started",
            EventKind::Finished => "finished",
            EventKind::Preempted => "preempted",
            EventKind::Reconfigured => "reconfigured",
            EventKind::ScaledOut => "scaled-out",
            EventKind::ScaledIn => "scaled-in",
        }
    }
}

/// One event as `GET /v1/events` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// Increasing number (this daemon's lifetime): pass the last one seen as `after=`.
    pub seq: u64,
    /// When (Unix seconds).
    pub at: f64,
    /// What happened.
    pub kind: EventKind,
    /// The job, for job events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<i64>,
    /// The job's or service's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Owner of the job or service (events of other tenants are shown only to admins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The service, for scaling events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<i64>,
    /// The instance, for scaling events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<i64>,
    /// The job's state after the event (`completed`, `failed`, `cancelled`, `pending`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<JobState>,
    /// Nodes involved (where a job runs or ran, the node reconfigured).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// The GPU reconfigured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    /// Why, or what: the transition's explanation, the new layout.
    pub detail: String,
}

/// `GET /v1/events`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventList {
    /// Visible events, oldest first.
    pub events: Vec<Event>,
}

/// The ring buffer of recent events.
#[derive(Debug)]
pub struct EventLog {
    ring: VecDeque<Event>,
    capacity: usize,
    next_seq: u64,
    /// Where each started job runs: its allocation is released before it is preempted or
    /// finishes, and those events still name its nodes.
    running_on: std::collections::HashMap<i64, Vec<String>>,
}

impl Default for EventLog {
    fn default() -> Self {
        EventLog::with_capacity(EVENT_CAPACITY)
    }
}

fn secs(at_us: u64) -> f64 {
    at_us as f64 / 1e6
}

impl EventLog {
    /// A log keeping at most `capacity` events (at least one).
    pub fn with_capacity(capacity: usize) -> EventLog {
        EventLog {
            ring: VecDeque::new(),
            capacity: capacity.max(1),
            next_seq: 1,
            running_on: Default::default(),
        }
    }

    fn push(&mut self, mut e: Event) {
        e.seq = self.next_seq;
        self.next_seq += 1;
        // Names, tenants and details are checked at submission or made by the daemon, but a
        // backend's message may carry anything: `{:?}` escapes control characters.
        tracing::info!(
            event = e.kind.as_str(),
            job = e.job,
            name = e.name.as_deref(),
            tenant = e.tenant.as_deref(),
            service = e.service,
            instance = e.instance,
            nodes = ?e.nodes,
            gpu = e.gpu,
            detail = ?e.detail,
            "{}",
            e.kind.as_str()
        );
        if self.ring.len() == self.capacity {
            self.ring.pop_front();
        }
        self.ring.push_back(e);
    }

    /// A job's state change: logged when it starts running, finishes, or goes back to the
    /// queue from starting or running (a preemption, with `detail` its reason).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record_transition(
        &mut self,
        at_us: u64,
        job: i64,
        name: &str,
        tenant: &str,
        placement: &[crate::backend::PlacedShare],
        from: JobState,
        to: JobState,
        detail: &str,
    ) {
        let kind = if to.is_terminal() && !from.is_terminal() {
            EventKind::Finished
        } else if to == JobState::Running && from != JobState::Running {
            EventKind::Started
        } else if to == JobState::Pending && matches!(from, JobState::Starting | JobState::Running)
        {
            EventKind::Preempted
        } else {
            return;
        };
        let mut nodes: Vec<String> = placement.iter().map(|s| s.node.clone()).collect();
        nodes.dedup();
        if kind == EventKind::Started {
            self.running_on.insert(job, nodes.clone());
        } else if let Some(were) = self.running_on.remove(&job) {
            if nodes.is_empty() {
                nodes = were;
            }
        }
        self.push(Event {
            seq: 0,
            at: secs(at_us),
            kind,
            job: Some(job),
            name: Some(name.to_string()),
            tenant: Some(tenant.to_string()),
            service: None,
            instance: None,
            state: Some(to),
            nodes,
            gpu: None,
            detail: detail.to_string(),
        });
    }

    /// A GPU's MIG layout: `detail` says what became of it.
    pub(crate) fn record_reconfigured(&mut self, at_us: u64, node: &str, gpu: u32, detail: String) {
        self.push(Event {
            seq: 0,
            at: secs(at_us),
            kind: EventKind::Reconfigured,
            job: None,
            name: None,
            tenant: None,
            service: None,
            instance: None,
            state: None,
            nodes: vec![node.to_string()],
            gpu: Some(gpu),
            detail,
        });
    }

    /// A service instance added (`out`) or removed.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record_scaled(
        &mut self,
        at_us: u64,
        out: bool,
        service: i64,
        name: &str,
        tenant: &str,
        instance: i64,
        nodes: Vec<String>,
        detail: String,
    ) {
        self.push(Event {
            seq: 0,
            at: secs(at_us),
            kind: if out {
                EventKind::ScaledOut
            } else {
                EventKind::ScaledIn
            },
            job: None,
            name: Some(name.to_string()),
            tenant: Some(tenant.to_string()),
            service: Some(service),
            instance: Some(instance),
            state: None,
            nodes,
            gpu: None,
            detail,
        });
    }

    /// Events after `after` (a `seq`) that `visible` lets through, oldest first, at most
    /// `limit` of the newest.
    pub fn list(
        &self,
        after: Option<u64>,
        limit: usize,
        visible: impl Fn(&Event) -> bool,
    ) -> Vec<Event> {
        let mut out: Vec<Event> = self
            .ring
            .iter()
            .rev()
            .take_while(|e| after.is_none_or(|a| e.seq > a))
            .filter(|e| visible(e))
            .take(limit)
            .cloned()
            .collect();
        out.reverse();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions_become_events_and_the_ring_is_bounded() {
        let mut log = EventLog::with_capacity(3);
        let t = |log: &mut EventLog, from, to, detail| {
            log.record_transition(1_000_000, 7, "a", "alice", &[], from, to, detail)
        };
        t(&mut log, JobState::Pending, JobState::Starting, "started");
        assert!(log.list(None, 10, |_| true).is_empty(), "a decision alone");
        t(
            &mut log,
            JobState::Starting,
            JobState::Running,
            "submitted to the backend",
        );
        t(
            &mut log,
            JobState::Running,
            JobState::Pending,
            "preempted by the policy; requeued",
        );
        t(
            &mut log,
            JobState::Running,
            JobState::Running,
            "retuned by the policy",
        );
        t(
            &mut log,
            JobState::Pending,
            JobState::Cancelled,
            "cancelled",
        );
        let kinds: Vec<_> = log
            .list(None, 10, |_| true)
            .iter()
            .map(|e| e.kind)
            .collect();
        assert_eq!(
            kinds,
            [
                EventKind::Started,
                EventKind::Preempted,
                EventKind::Finished
            ]
        );
        log.record_reconfigured(2_000_000, "n1", 0, "layout 3g.40gb@0".into());
        let all = log.list(None, 10, |_| true);
        assert_eq!(all.len(), 3, "capacity 3: the oldest dropped");
        assert_eq!(all[0].kind, EventKind::Preempted);
        assert_eq!(all[0].detail, "preempted by the policy; requeued");
        let seqs: Vec<u64> = all.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [2, 3, 4]);
        assert_eq!(log.list(Some(3), 10, |_| true).len(), 1);
        assert_eq!(
            log.list(None, 1, |_| true)[0].seq,
            4,
            "the newest first kept"
        );
        assert_eq!(
            log.list(None, 10, |e| e.tenant.is_none()).len(),
            1,
            "filtered"
        );
    }
}
