//! Tessera's real mode: the `tessera serve` daemon and its client.
//!
//! The daemon drives the same [`tessera_sched::Policy`] objects as the simulator, on real
//! jobs: it keeps jobs in a durable SQLite [`store`], turns the resource manager's inventory
//! into a [`tessera_model::Cluster`] ([`inventory`]), calls the policy at every scheduling point
//! ([`engine`]), and runs the decisions through a [`backend`] (Slurm or local processes). A
//! versioned JSON HTTP API serves clients and the job SDK; `GET /metrics` serves Prometheus.
//!
//! - [`run`] (blocking), [`serve`], [`serve_on`], [`spawn`]: run a daemon (from a
//!   [`DaemonConfig`]).
//! - [`Client`]: the blocking client the `tessera` CLI verbs use.
//! - [`types`]: the API's JSON bodies; [`spec::JobSpec`]: what clients submit.
//! - [`backend::Backend`]: the resource-manager interface, with [`backend::slurm`] and
//!   [`backend::local`].
//!
//! ```no_run
//! # async fn run() -> Result<(), tessera_daemon::DaemonError> {
//! let config = tessera_daemon::DaemonConfig::from_file("tessera.yaml".as_ref())?;
//! tessera_daemon::serve(config).await
//! # }
//! ```
#![deny(missing_docs)]
#![warn(unreachable_pub)]

pub mod backend;
pub mod client;
pub mod clock;
pub mod config;
pub mod core;
pub mod engine;
pub mod error;
pub mod events;
pub mod forecast;
pub mod forecast_snapshot;
pub mod forecast_whatif;
pub mod inventory;
pub mod metrics;
pub mod services;
pub mod spec;
pub mod store;
pub mod types;

mod server;
mod server_guard;
mod server_services;
#[cfg(test)]
mod services_tests;
mod web;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use backend::Backend;
pub use client::{Client, ClientError};
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{hash_token, BackendConfig, DaemonConfig};
pub use engine::Engine;
pub use error::{ApiError, BackendError, DaemonError};
pub use spec::JobSpec;

/// Builds the backend a config names.
pub fn build_backend(config: &BackendConfig) -> Result<Box<dyn Backend>, DaemonError> {
    Ok(match config {
        BackendConfig::Slurm(s) => Box::new(backend::slurm::SlurmBackend::new(s.clone())?),
        BackendConfig::Local(l) => Box::new(backend::local::LocalBackend::new(l.clone())?),
    })
}

/// Runs the daemon: binds `config.listen`, serves until SIGINT or SIGTERM.
pub async fn serve(config: DaemonConfig) -> Result<(), DaemonError> {
    let not_started = |e: DaemonError| DaemonError::NotStarted(Box::new(e));
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| not_started(e.into()))?;
    let backend = build_backend(&config.backend).map_err(not_started)?;
    serve_on(
        config,
        backend,
        Arc::new(SystemClock::new()),
        listener,
        shutdown_signal(),
    )
    .await
}

/// Runs the daemon on a Tokio runtime of its own (two worker threads) until SIGINT or SIGTERM:
/// the blocking entry point for `tessera serve --config FILE`, so callers need no runtime.
pub fn run(config: DaemonConfig) -> Result<(), DaemonError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(serve(config))
}

/// Runs the daemon with a given backend and clock on an already bound listener, until
/// `shutdown` resolves (tests, embedding).
pub async fn serve_on(
    config: DaemonConfig,
    backend: Box<dyn Backend>,
    clock: Arc<dyn Clock>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), DaemonError> {
    let cfg = config.clone();
    let engine = tokio::task::spawn_blocking(move || Engine::open(&cfg, backend, clock))
        .await
        .map_err(|e| DaemonError::Engine(e.to_string()))?
        .map_err(|e| DaemonError::NotStarted(Box::new(e)))?;
    server::serve_engine(
        engine,
        listener,
        &config.limits,
        Duration::from_millis(config.poll_interval_ms),
        shutdown,
    )
    .await
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}

/// A daemon running on its own thread and runtime (see [`spawn`]).
#[derive(Debug)]
pub struct DaemonHandle {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<(), DaemonError>>>,
}

impl DaemonHandle {
    /// The address the API listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
    /// Stops the daemon and waits for it.
    pub fn shutdown(mut self) -> Result<(), DaemonError> {
        self.stop_inner()
    }
    fn stop_inner(&mut self) -> Result<(), DaemonError> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(DaemonError::Engine("daemon thread panicked".into())),
            None => Ok(()),
        }
    }
}

impl Drop for DaemonHandle {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

/// Starts a daemon on a background thread with its own Tokio runtime and returns once it is
/// listening (with `config.listen` port 0, an ephemeral port; see [`DaemonHandle::addr`]).
pub fn spawn(
    config: DaemonConfig,
    backend: Box<dyn Backend>,
    clock: Arc<dyn Clock>,
) -> Result<DaemonHandle, DaemonError> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<SocketAddr, DaemonError>>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("tessera-daemon".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let listener = match tokio::net::TcpListener::bind(config.listen).await {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = ready_tx.send(Err(DaemonError::Io(e)));
                        return Ok(());
                    }
                };
                let addr = listener.local_addr()?;
                let cfg = config.clone();
                let engine =
                    match tokio::task::spawn_blocking(move || Engine::open(&cfg, backend, clock))
                        .await
                    {
                        Ok(Ok(e)) => e,
                        Ok(Err(e)) => {
                            let _ = ready_tx.send(Err(e));
                            return Ok(());
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(DaemonError::Engine(e.to_string())));
                            return Ok(());
                        }
                    };
                let _ = ready_tx.send(Ok(addr));
                let shutdown = async move {
                    let _ = stop_rx.await;
                };
                server::serve_engine(
                    engine,
                    listener,
                    &config.limits,
                    Duration::from_millis(config.poll_interval_ms),
                    shutdown,
                )
                .await
            })
        })?;
    match ready_rx.recv() {
        Ok(Ok(addr)) => Ok(DaemonHandle {
            addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        }),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(e)
        }
        Err(_) => match thread.join() {
            Ok(Err(e)) => Err(e),
            _ => Err(DaemonError::Engine(
                "daemon thread ended before listening".into(),
            )),
        },
    }
}
