//! A small blocking client of the daemon's API, for the `tessera` CLI verbs and for tests.
//!
//! ```no_run
//! let client = tessera_daemon::Client::new("http://127.0.0.1:8765", Some("TOKEN".into()));
//! let job = client.submit("name: demo\ncommand: [sleep, '10']\ngpus: 1\n")?;
//! println!("{} is {:?}", job.id, client.describe(job.id)?.job.state);
//! # Ok::<(), tessera_daemon::ClientError>(())
//! ```

use std::time::Duration;

use serde::de::DeserializeOwned;
use thiserror::Error;

use crate::error::ErrorBody;
use crate::types::{JobDetail, JobList, JobView, NodeList, ProgressAck, ProgressReport, QueueView};

/// Why a client call failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The daemon could not be reached, or the connection broke.
    #[error("cannot reach the daemon at {url}: {message}")]
    Transport {
        /// The URL.
        url: String,
        /// The transport error.
        message: String,
    },
    /// The daemon answered with an error.
    #[error("{code} ({status}): {message}")]
    Api {
        /// HTTP status.
        status: u16,
        /// Error code from the body (`unauthorized`, `not_found`, ...).
        code: String,
        /// Message from the body.
        message: String,
    },
    /// The answer was not the expected JSON.
    #[error("unexpected answer ({status}): {message}")]
    Decode {
        /// HTTP status.
        status: u16,
        /// What went wrong.
        message: String,
    },
}

impl ClientError {
    /// The HTTP status of an API error, if this is one.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } | ClientError::Decode { status, .. } => Some(*status),
            ClientError::Transport { .. } => None,
        }
    }
}

/// A client of one daemon, with one bearer token.
#[derive(Clone, Debug)]
pub struct Client {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
}

impl Client {
    /// A client of the daemon at `base_url` (`http://127.0.0.1:8765`).
    pub fn new(base_url: &str, token: Option<String>) -> Client {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        Client {
            base: base_url.trim_end_matches('/').to_string(),
            token,
            agent,
        }
    }

    /// The base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn finish<T: DeserializeOwned>(
        &self,
        url: &str,
        result: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<T, ClientError> {
        let mut resp = result.map_err(|e| ClientError::Transport {
            url: url.to_string(),
            message: e.to_string(),
        })?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .with_config()
            .limit(256 * 1024 * 1024)
            .read_to_string()
            .map_err(|e| ClientError::Transport {
                url: url.to_string(),
                message: e.to_string(),
            })?;
        if !(200..300).contains(&status) {
            return Err(match serde_json::from_str::<ErrorBody>(&text) {
                Ok(b) => ClientError::Api {
                    status,
                    code: b.error.code,
                    message: b.error.message,
                },
                Err(_) => ClientError::Decode {
                    status,
                    message: text.chars().take(200).collect(),
                },
            });
        }
        serde_json::from_str(&text).map_err(|e| ClientError::Decode {
            status,
            message: e.to_string(),
        })
    }

    fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let url = self.url(path);
        let mut req = self.agent.get(&url);
        if let Some(t) = &self.token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        self.finish(&url, req.call())
    }

    fn send<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, &str)>,
    ) -> Result<T, ClientError> {
        let url = self.url(path);
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let result = match method {
            "DELETE" => {
                let mut req = self.agent.delete(&url);
                if let Some(a) = &auth {
                    req = req.header("Authorization", a);
                }
                req.call()
            }
            _ => {
                let mut req = self.agent.post(&url);
                if let Some(a) = &auth {
                    req = req.header("Authorization", a);
                }
                let (ctype, text) = body.unwrap_or(("application/json", ""));
                req.header("Content-Type", ctype).send(text)
            }
        };
        self.finish(&url, result)
    }

    /// Submits a job spec (YAML or JSON text, as in a spec file).
    pub fn submit(&self, spec_text: &str) -> Result<JobView, ClientError> {
        let ctype = if spec_text.trim_start().starts_with('{') {
            "application/json"
        } else {
            "application/yaml"
        };
        self.send("POST", "/v1/jobs", Some((ctype, spec_text)))
    }

    /// Jobs visible to this token.
    pub fn list(&self) -> Result<Vec<JobView>, ClientError> {
        self.list_all("/v1/jobs?")
    }

    /// Every page of a listing (`path` ends with `?` or `&`).
    fn list_all(&self, path: &str) -> Result<Vec<JobView>, ClientError> {
        let mut jobs = Vec::new();
        let mut after = None;
        loop {
            let page = match after {
                None => self.get::<JobList>(path.trim_end_matches(['?', '&']))?,
                Some(a) => self.get::<JobList>(&format!("{path}after={a}"))?,
            };
            jobs.extend(page.jobs);
            match page.next_after {
                Some(a) => after = Some(a),
                None => return Ok(jobs),
            }
        }
    }

    /// One page of `GET /v1/jobs` with filters (`query` such as `state=pending&limit=50`).
    pub fn list_page(&self, query: &str) -> Result<JobList, ClientError> {
        self.get(&format!("/v1/jobs?{query}"))
    }

    /// Jobs visible to this token in one state.
    pub fn list_state(&self, state: crate::types::JobState) -> Result<Vec<JobView>, ClientError> {
        self.list_all(&format!("/v1/jobs?state={}&", state.as_str()))
    }

    /// One job with its history, pending reason and queue position.
    pub fn describe(&self, id: i64) -> Result<JobDetail, ClientError> {
        self.get(&format!("/v1/jobs/{id}"))
    }

    /// Cancels a job; returns it as cancelled.
    pub fn cancel(&self, id: i64) -> Result<JobView, ClientError> {
        self.send("DELETE", &format!("/v1/jobs/{id}"), None)
    }

    /// Submits an inference service (a `kind: Workload` document with one service).
    pub fn submit_service(
        &self,
        spec_text: &str,
    ) -> Result<crate::services::ServiceView, ClientError> {
        let ctype = if spec_text.trim_start().starts_with('{') {
            "application/json"
        } else {
            "application/yaml"
        };
        self.send("POST", "/v1/services", Some((ctype, spec_text)))
    }

    /// Services visible to this token.
    pub fn services(&self) -> Result<Vec<crate::services::ServiceView>, ClientError> {
        let l: crate::services::ServiceList = self.get("/v1/services")?;
        Ok(l.services)
    }

    /// One service with its instances.
    pub fn service(&self, id: i64) -> Result<crate::services::ServiceView, ClientError> {
        self.get(&format!("/v1/services/{id}"))
    }

    /// Reports an instance's load (with the instance's own `TESSERA_TOKEN` as this client's
    /// token).
    pub fn report_load(
        &self,
        service: i64,
        instance: i64,
        report: &crate::services::LoadReport,
    ) -> Result<crate::services::ServiceView, ClientError> {
        let body = serde_json::to_string(report).map_err(|e| ClientError::Decode {
            status: 0,
            message: e.to_string(),
        })?;
        self.send(
            "POST",
            &format!("/v1/services/{service}/instances/{instance}/load"),
            Some(("application/json", &body)),
        )
    }

    /// Retires a service (every instance stopped).
    pub fn retire_service(&self, id: i64) -> Result<crate::services::ServiceView, ClientError> {
        self.send("DELETE", &format!("/v1/services/{id}"), None)
    }

    /// The cluster's nodes with capacity and allocation.
    pub fn nodes(&self) -> Result<NodeList, ClientError> {
        self.get("/v1/nodes")
    }

    /// The live state a what-if forks from (an administrator's token).
    pub fn snapshot(&self) -> Result<crate::forecast_snapshot::LiveSnapshot, ClientError> {
        self.get("/v1/snapshot")
    }

    /// Queues and pending jobs in order.
    pub fn queue(&self) -> Result<QueueView, ClientError> {
        self.get("/v1/queue")
    }

    /// Sets a node's health as an administrator: `Down` stops and requeues its jobs,
    /// `Draining` places nothing new there, `Up` hands its health back to the backend.
    pub fn set_node_health(
        &self,
        node: &str,
        health: crate::backend::NodeHealth,
    ) -> Result<NodeList, ClientError> {
        let body = serde_json::json!({ "health": health }).to_string();
        self.send(
            "POST",
            &format!("/v1/nodes/{node}/health"),
            Some(("application/json", &body)),
        )
    }

    /// Reports a job's progress (what the SDK does).
    pub fn report_progress(
        &self,
        id: i64,
        report: &ProgressReport,
    ) -> Result<ProgressAck, ClientError> {
        let body = serde_json::to_string(report).map_err(|e| ClientError::Decode {
            status: 0,
            message: e.to_string(),
        })?;
        self.send(
            "POST",
            &format!("/v1/jobs/{id}/progress"),
            Some(("application/json", &body)),
        )
    }

    /// The Prometheus metrics text.
    pub fn metrics(&self) -> Result<String, ClientError> {
        let url = self.url("/metrics");
        let mut req = self.agent.get(&url);
        if let Some(t) = &self.token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        let mut resp = req.call().map_err(|e| ClientError::Transport {
            url: url.clone(),
            message: e.to_string(),
        })?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .read_to_string()
            .map_err(|e| ClientError::Transport {
                url: url.clone(),
                message: e.to_string(),
            })?;
        if status != 200 {
            return Err(ClientError::Api {
                status,
                code: "error".into(),
                message: text.chars().take(200).collect(),
            });
        }
        Ok(text)
    }
}
