//! The durable store: SQLite (bundled) in WAL mode.
//!
//! Tables: `jobs` (one row per job, rewritten at every transition), `transitions` (append-only
//! history), `runs` (every backend run the daemon started, and whether it must still be
//! stopped; also launches given up while in flight, until they answer), `tenants` (hashed tokens) and `meta` (schema version). The engine writes a batch of
//! changes in one transaction and only then acts on the backend.

use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};

use serde::{Deserialize, Serialize};
use tessera_model::ParallelPlan;

use crate::config::SyncMode;
use crate::core::runs::PlacedShare;
use crate::error::DaemonError;
use crate::types::JobState;

const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tenants (
    name TEXT PRIMARY KEY, token_sha256 TEXT NOT NULL, admin INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL, queue TEXT NOT NULL, name TEXT NOT NULL,
    spec TEXT NOT NULL,
    state TEXT NOT NULL,
    priority INTEGER NOT NULL,
    submit_us INTEGER NOT NULL, start_us INTEGER, end_us INTEGER,
    attempt INTEGER NOT NULL,
    placement TEXT,
    handle TEXT,
    exit_code INTEGER,
    message TEXT,
    progress_iters INTEGER NOT NULL DEFAULT 0,
    samples_per_sec REAL, iters_per_sec REAL, progress_us INTEGER,
    attained_gpu_secs REAL NOT NULL DEFAULT 0,
    preemptions INTEGER NOT NULL DEFAULT 0,
    job_token_sha256 TEXT,
    backend_state TEXT);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE TABLE IF NOT EXISTS transitions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id INTEGER NOT NULL, at_us INTEGER NOT NULL,
    from_state TEXT, to_state TEXT NOT NULL, detail TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS transitions_job ON transitions(job_id);
CREATE TABLE IF NOT EXISTS runs (
    handle TEXT PRIMARY KEY, job_id INTEGER NOT NULL, attempt INTEGER NOT NULL,
    state TEXT NOT NULL);
";

pub use crate::core::records::{JobQuery, JobRow, RunRow, RunState, TransitionRow, WriteBatch};

/// The placement column when the allocation has a parallelism plan.
#[derive(Serialize, Deserialize)]
struct StoredPlacement {
    shares: Vec<PlacedShare>,
    #[serde(default)]
    plan: Option<ParallelPlan>,
}

/// A run state's name in the store.
fn run_state_name(state: RunState) -> &'static str {
    match state {
        RunState::Live => "live",
        RunState::Stop => "stop",
        RunState::Gone => "gone",
        RunState::Launching => "launching",
    }
}

/// A run state from its name in the store (unknown names: gone).
fn parse_run_state(s: &str) -> RunState {
    match s {
        "live" => RunState::Live,
        "stop" => RunState::Stop,
        "launching" => RunState::Launching,
        _ => RunState::Gone,
    }
}

/// The SQLite store.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    /// The database file, opened apart from SQLite to hold the exclusive `flock` as long as
    /// the store is open; declared after `conn` so that it is closed after SQLite's own
    /// descriptors (closing a descriptor drops the process's POSIX locks on the file). `None`
    /// for a read-only [`Store::inspect`] handle.
    _lock: Option<std::fs::File>,
    /// Write transactions committed and job rows written by this handle (regression tests
    /// check group commit and that a scheduling pass writes only what changed).
    writes: WriteCounts,
}

/// What a [`Store`] handle has written so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteCounts {
    /// Committed [`Store::commit`] transactions.
    pub transactions: u64,
    /// Job rows written by them.
    pub job_rows: u64,
}

/// The note beside a store naming its holder's pid: `t.db` -> `t.db.lock` (the lock itself is
/// on the database file).
pub fn lock_path(path: &Path) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    name.into()
}

/// Tries at taking the store's lock, 25 ms apart, before another holder is assumed.
const LOCK_ATTEMPTS: u32 = 20;

/// The pid holding a `flock` on the file `meta` describes, read from `/proc/locks` (Linux);
/// `None` elsewhere or when it cannot be told.
fn flock_holder(meta: &std::fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let dev = meta.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let want = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|line| {
        // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
        let fields: Vec<&str> = line.split_whitespace().collect();
        let at = fields.iter().position(|f| *f == "FLOCK")?;
        let pid = fields.get(at + 3)?;
        let id = fields.get(at + 4)?;
        (*id == want).then(|| pid.parse().ok()).flatten()
    })
}

/// Opens the database file itself (creating it 0600 when absent) and takes an exclusive,
/// non-blocking `flock` on it, so that one daemon owns the store by identity: a second daemon
/// reaching the same inode through a symlink, a hard link or after the `.lock` note was
/// deleted is refused all the same. `flock` locks are independent of the POSIX locks SQLite
/// takes on the same file, and the kernel drops ours when the holder dies, so a SIGKILLed
/// daemon leaves no stale lock. Returns the locked file and whether it was created now.
///
/// Our pid is then written into `<store>.lock`, only so that a refused daemon can name the
/// holder where `/proc/locks` cannot be read.
fn lock_store(path: &Path) -> Result<(std::fs::File, bool), DaemonError> {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let open_err = |p: &Path, e: std::io::Error| DaemonError::StoreOpen {
        path: p.to_path_buf(),
        message: e.to_string(),
    };
    let mut created = false;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(f) => {
            created = true;
            f
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| open_err(path, e))?,
        Err(e) => return Err(open_err(path, e)),
    };
    // A lock that goes within half a second is not another daemon's: a process another thread
    // of ours is spawning holds a copy of every descriptor until it executes (and a store just
    // closed by this process may be in that window); a live daemon's lock stays.
    let mut rc = -1;
    for attempt in 0..LOCK_ATTEMPTS {
        // SAFETY: flock(2) on a descriptor we own; no memory is passed.
        rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        let busy =
            rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EWOULDBLOCK);
        if !busy || attempt + 1 == LOCK_ATTEMPTS {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let holder = file
                .metadata()
                .ok()
                .and_then(|m| flock_holder(&m))
                .or_else(|| {
                    std::fs::read_to_string(lock_path(path))
                        .ok()
                        .and_then(|t| t.trim().parse().ok())
                });
            return Err(DaemonError::StoreLocked {
                path: path.to_path_buf(),
                holder,
            });
        }
        return Err(open_err(path, err));
    }
    let note = lock_path(path);
    let _ = std::fs::remove_file(&note);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&note)
        .map_err(|e| open_err(&note, e))?;
    writeln!(f, "{}", std::process::id()).map_err(|e| open_err(&note, e))?;
    Ok((file, created))
}

/// Takes group and other permissions off an existing store and its WAL and shared-memory
/// files (stores made by earlier versions were 0644): job env may hold secrets. New files are
/// created 0600, and SQLite gives the `-wal` and `-shm` files the database's mode.
fn restrict_mode(path: &Path) -> Result<(), DaemonError> {
    use std::os::unix::fs::PermissionsExt;
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let p = std::path::PathBuf::from(name);
        let meta = match std::fs::metadata(&p) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(DaemonError::StoreOpen {
                    path: p,
                    message: e.to_string(),
                })
            }
        };
        if meta.permissions().mode() & 0o077 != 0 {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).map_err(|e| {
                DaemonError::StoreOpen {
                    path: p.clone(),
                    message: format!("cannot make it private (0600): {e}"),
                }
            })?;
            tracing::warn!(file = %p.display(), "store file was readable by others; now 0600");
        }
    }
    Ok(())
}

/// Refuses a file that is not a tessera store before anything writes to it: garbage (not
/// SQLite) and SQLite databases of other programs (tables, but no tessera `meta` row). A file
/// `lock_store` has just created is a new store; an empty file found on disk (with no WAL
/// beside it) is refused: a truncated store would otherwise start empty and every job in it
/// would vanish without a word.
fn check_foreign(path: &Path, created_now: bool) -> Result<(), DaemonError> {
    let refuse = |message: String| DaemonError::StoreOpen {
        path: path.to_path_buf(),
        message,
    };
    let len = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(refuse(e.to_string())),
    };
    if len == 0 {
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        let wal_len = std::fs::metadata(std::path::PathBuf::from(wal)).map_or(0, |m| m.len());
        if created_now || wal_len > 0 {
            return Ok(());
        }
        return Err(refuse(
            "the file is empty (0 bytes): a store truncated or replaced, not a new one; \
             refusing to start on it with no jobs. Restore it from a backup, or delete it \
             (or point `store` elsewhere) to start a new, empty store"
                .into(),
        ));
    }
    let conn = Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| refuse(e.to_string()))?;
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .and_then(|mut st| {
            st.query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(|e| refuse(format!("not a SQLite database ({e})")))?;
    if tables.is_empty() {
        return Ok(());
    }
    let ours = tables.iter().any(|t| t == "meta")
        && conn
            .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
                r.get::<_, String>(0)
            })
            .optional()
            .ok()
            .flatten()
            .is_some();
    if !ours {
        return Err(refuse(format!(
            "not a tessera store (a SQLite database with tables {}); refusing to modify it",
            tables
                .iter()
                .take(5)
                .map(|t| format!("{t:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(())
}

fn bad(e: impl std::fmt::Display) -> DaemonError {
    DaemonError::StoreFormat(e.to_string())
}

impl Store {
    /// Opens (creating if needed) the database at `path`.
    ///
    /// Takes an exclusive lock on the database file itself first: a store held by another
    /// daemon, by whatever path, is refused with [`DaemonError::StoreLocked`]. A file that is
    /// not a tessera store, or an empty one found on disk, is refused before anything is
    /// written to it. The store and its WAL are private to the daemon's user (0600).
    pub fn open(path: &Path, sync: SyncMode) -> Result<Store, DaemonError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| DaemonError::StoreOpen {
                path: dir.to_path_buf(),
                message: e.to_string(),
            })?;
        }
        let (lock, created_now) = lock_store(path)?;
        check_foreign(path, created_now)?;
        restrict_mode(path)?;
        Self::open_locked(path, sync, lock).map_err(|e| match e {
            DaemonError::Store(e) => DaemonError::StoreOpen {
                path: path.to_path_buf(),
                message: e.to_string(),
            },
            DaemonError::StoreFormat(m) => DaemonError::StoreOpen {
                path: path.to_path_buf(),
                message: format!("corrupt or from another version: {m}"),
            },
            other => other,
        })
    }

    /// Opens a store read-only without taking the lock (diagnostics and tests, while a daemon
    /// may hold it).
    pub fn inspect(path: &Path) -> Result<Store, DaemonError> {
        let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(|e| DaemonError::StoreOpen {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        Ok(Store {
            conn,
            _lock: None,
            writes: WriteCounts::default(),
        })
    }

    fn open_locked(path: &Path, sync: SyncMode, lock: std::fs::File) -> Result<Store, DaemonError> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(
            None,
            "synchronous",
            match sync {
                SyncMode::Full => "FULL",
                SyncMode::Normal => "NORMAL",
            },
        )?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.execute_batch(SCHEMA)?;
        conn.execute_batch(crate::services::SCHEMA)?;
        let version: Option<String> = conn
            .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
                r.get(0)
            })
            .optional()?;
        match version {
            None => {
                conn.execute(
                    "INSERT INTO meta(key, value) VALUES ('schema', ?1)",
                    [SCHEMA_VERSION.to_string()],
                )?;
            }
            Some(v) if v == SCHEMA_VERSION.to_string() => {}
            Some(v) => {
                return Err(bad(format!(
                    "schema version {v}, expected {SCHEMA_VERSION}"
                )))
            }
        }
        let instance: Option<String> = conn
            .query_row("SELECT value FROM meta WHERE key = 'instance'", [], |r| {
                r.get(0)
            })
            .optional()?;
        if instance.is_none() {
            let id = crate::config::hex(&crate::config::random_bytes::<4>());
            conn.execute("INSERT INTO meta(key, value) VALUES ('instance', ?1)", [id])?;
        }
        let check: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
        if check != "ok" {
            return Err(bad(format!("integrity check: {check}")));
        }
        Ok(Store {
            conn,
            _lock: Some(lock),
            writes: WriteCounts::default(),
        })
    }

    /// A random id of this store, fixed at creation; part of every backend run name.
    pub fn instance(&self) -> Result<String, DaemonError> {
        let v: String =
            self.conn
                .query_row("SELECT value FROM meta WHERE key = 'instance'", [], |r| {
                    r.get(0)
                })?;
        if v.is_empty() || !v.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(bad(format!("instance id {v:?}")));
        }
        Ok(v)
    }

    /// Replaces the tenants table with the configured tenants.
    pub fn set_tenants(
        &mut self,
        tenants: &[crate::config::TenantConfig],
    ) -> Result<(), DaemonError> {
        let tx = self.conn.transaction()?;
        tx.execute("DELETE FROM tenants", [])?;
        for t in tenants {
            tx.execute(
                "INSERT INTO tenants(name, token_sha256, admin) VALUES (?1, ?2, ?3)",
                params![t.name, t.token_sha256.to_ascii_lowercase(), t.admin],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// The tenants as (name, token hash, admin).
    pub fn tenants(&self) -> Result<Vec<(String, String, bool)>, DaemonError> {
        let mut st = self
            .conn
            .prepare("SELECT name, token_sha256, admin FROM tenants ORDER BY name")?;
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Writes a batch in one transaction.
    pub fn commit(&mut self, batch: &WriteBatch) -> Result<(), DaemonError> {
        self.commit_all(&[batch])
    }

    /// Writes batches, in order, in one transaction (one fsync): what the daemon's loop
    /// gathered in one iteration (bookkeeping, decisions, then submissions).
    pub fn commit_all(&mut self, batches: &[&WriteBatch]) -> Result<(), DaemonError> {
        if batches.iter().all(|b| b.is_empty()) {
            return Ok(());
        }
        let tx = self.conn.transaction()?;
        for batch in batches {
            let mut job = tx.prepare_cached(
                "INSERT OR REPLACE INTO jobs (id, tenant, queue, name, spec, state, priority, submit_us,
                 start_us, end_us, attempt, placement, handle, exit_code, message, progress_iters,
                 samples_per_sec, iters_per_sec, progress_us, attained_gpu_secs, preemptions,
                 job_token_sha256, backend_state)
                 VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22,?23)",
            )?;
            for j in &batch.jobs {
                let placement = if j.placement.is_empty() {
                    None
                } else if let Some(plan) = j.plan {
                    // With a plan the column holds an object; without, the bare list older
                    // stores hold (read both ways, so no schema change was needed).
                    let doc = StoredPlacement {
                        shares: j.placement.clone(),
                        plan: Some(plan),
                    };
                    Some(serde_json::to_string(&doc).map_err(bad)?)
                } else {
                    Some(serde_json::to_string(&j.placement).map_err(bad)?)
                };
                job.execute(params![
                    j.id,
                    j.tenant,
                    j.queue,
                    j.name,
                    j.spec_json,
                    j.state.as_str(),
                    j.priority,
                    j.submit_us as i64,
                    j.start_us.map(|v| v as i64),
                    j.end_us.map(|v| v as i64),
                    j.attempt,
                    placement,
                    j.handle,
                    j.exit_code,
                    j.message,
                    j.progress_iters as i64,
                    j.samples_per_sec,
                    j.iters_per_sec,
                    j.progress_us.map(|v| v as i64),
                    j.attained_gpu_secs,
                    j.preemptions,
                    j.job_token_sha256,
                    j.backend_state,
                ])?;
            }
            let mut tr = tx.prepare_cached(
                "INSERT INTO transitions (job_id, at_us, from_state, to_state, detail) VALUES (?1,?2,?3,?4,?5)",
            )?;
            for t in &batch.transitions {
                tr.execute(params![
                    t.job_id,
                    t.at_us as i64,
                    t.from.map(JobState::as_str),
                    t.to.as_str(),
                    t.detail
                ])?;
            }
            let mut run = tx.prepare_cached(
                "INSERT OR REPLACE INTO runs (handle, job_id, attempt, state) VALUES (?1,?2,?3,?4)",
            )?;
            for r in &batch.runs {
                run.execute(params![
                    r.handle,
                    r.job_id,
                    r.attempt,
                    run_state_name(r.state)
                ])?;
            }
            crate::services::write(&tx, &batch.services, &batch.instances)?;
        }
        tx.commit()?;
        self.writes.transactions += 1;
        self.writes.job_rows += batches.iter().map(|b| b.jobs.len() as u64).sum::<u64>();
        Ok(())
    }

    /// What this handle has written so far.
    pub fn writes(&self) -> WriteCounts {
        self.writes
    }

    /// Every job, by id.
    pub fn load_jobs(&self) -> Result<Vec<JobRow>, DaemonError> {
        self.select_jobs("", &[])
    }

    /// One job's row, by id (finished jobs are served from here, not from memory).
    pub fn job(&self, id: i64) -> Result<Option<JobRow>, DaemonError> {
        Ok(self.select_jobs("WHERE id = ?1", &[&id])?.pop())
    }

    /// One page of jobs in id order, filtered as `query` says.
    pub fn list_jobs(&self, query: &JobQuery) -> Result<Vec<JobRow>, DaemonError> {
        let mut clauses: Vec<String> = Vec::new();
        let mut params: Vec<Box<dyn rusqlite::ToSql>> = Vec::new();
        if let Some(t) = &query.tenant {
            params.push(Box::new(t.clone()));
            clauses.push(format!("tenant = ?{}", params.len()));
        }
        if let Some(id) = query.id {
            params.push(Box::new(id));
            clauses.push(format!("id = ?{}", params.len()));
        }
        if let Some(s) = query.state {
            params.push(Box::new(s.as_str().to_string()));
            clauses.push(format!("state = ?{}", params.len()));
        }
        if let Some(q) = &query.queue {
            params.push(Box::new(q.clone()));
            clauses.push(format!("queue = ?{}", params.len()));
        }
        if let Some(a) = query.after {
            params.push(Box::new(a));
            clauses.push(format!("id > ?{}", params.len()));
        }
        let mut tail = String::new();
        if !clauses.is_empty() {
            tail.push_str("WHERE ");
            tail.push_str(&clauses.join(" AND "));
        }
        params.push(Box::new(i64::try_from(query.limit).unwrap_or(i64::MAX)));
        tail.push_str(&format!(" ORDER BY id LIMIT ?{}", params.len()));
        let refs: Vec<&dyn rusqlite::ToSql> = params.iter().map(|p| p.as_ref()).collect();
        self.select_jobs(&tail, &refs)
    }

    fn select_jobs(
        &self,
        tail: &str,
        params: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<JobRow>, DaemonError> {
        let order = if tail.contains("ORDER BY") {
            ""
        } else {
            " ORDER BY id"
        };
        let mut st = self.conn.prepare_cached(&format!(
            "SELECT id, tenant, queue, name, spec, state, priority, submit_us, start_us, end_us, attempt,
             placement, handle, exit_code, message, progress_iters, samples_per_sec, iters_per_sec,
             progress_us, attained_gpu_secs, preemptions, job_token_sha256, backend_state
             FROM jobs {tail}{order}"
        ))?;
        let rows = st.query_map(params, |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, String>(5)?,
                r.get::<_, i32>(6)?,
                r.get::<_, i64>(7)?,
                r.get::<_, Option<i64>>(8)?,
                r.get::<_, Option<i64>>(9)?,
                r.get::<_, u32>(10)?,
                r.get::<_, Option<String>>(11)?,
                (
                    r.get::<_, Option<String>>(12)?,
                    r.get::<_, Option<i32>>(13)?,
                    r.get::<_, Option<String>>(14)?,
                    r.get::<_, i64>(15)?,
                    r.get::<_, Option<f64>>(16)?,
                    r.get::<_, Option<f64>>(17)?,
                    r.get::<_, Option<i64>>(18)?,
                    r.get::<_, f64>(19)?,
                    r.get::<_, u32>(20)?,
                    r.get::<_, Option<String>>(21)?,
                    r.get::<_, Option<String>>(22)?,
                ),
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (
                id,
                tenant,
                queue,
                name,
                spec_json,
                state,
                priority,
                submit,
                start,
                end,
                attempt,
                placement,
                rest,
            ) = row?;
            let state =
                JobState::parse(&state).ok_or_else(|| bad(format!("job {id}: state {state:?}")))?;
            let (placement, plan) = match placement {
                Some(p) if p.trim_start().starts_with('{') => {
                    let doc: StoredPlacement = serde_json::from_str(&p)
                        .map_err(|e| bad(format!("job {id}: placement: {e}")))?;
                    (doc.shares, doc.plan)
                }
                Some(p) => (
                    serde_json::from_str::<Vec<PlacedShare>>(&p)
                        .map_err(|e| bad(format!("job {id}: placement: {e}")))?,
                    None,
                ),
                None => (Vec::new(), None),
            };
            let (
                handle,
                exit_code,
                message,
                iters,
                sps,
                ips,
                pus,
                attained,
                preemptions,
                token,
                bstate,
            ) = rest;
            out.push(JobRow {
                id,
                tenant,
                queue,
                name,
                spec_json,
                state,
                priority,
                submit_us: submit.max(0) as u64,
                start_us: start.map(|v| v.max(0) as u64),
                end_us: end.map(|v| v.max(0) as u64),
                attempt,
                placement,
                plan,
                handle,
                exit_code,
                message,
                progress_iters: iters.max(0) as u64,
                samples_per_sec: sps,
                iters_per_sec: ips,
                progress_us: pus.map(|v| v.max(0) as u64),
                attained_gpu_secs: attained,
                preemptions,
                job_token_sha256: token,
                backend_state: bstate,
            });
        }
        Ok(out)
    }

    /// Every service and every instance not gone (restart).
    pub fn load_services(
        &self,
    ) -> Result<
        (
            Vec<crate::services::ServiceRow>,
            Vec<crate::services::InstanceRow>,
        ),
        DaemonError,
    > {
        crate::services::load(&self.conn)
    }

    /// The largest service instance id ever used.
    pub fn max_instance_id(&self) -> Result<i64, DaemonError> {
        crate::services::max_instance_id(&self.conn)
    }

    /// Runs not yet gone.
    pub fn open_runs(&self) -> Result<Vec<RunRow>, DaemonError> {
        let mut st = self
            .conn
            .prepare("SELECT handle, job_id, attempt, state FROM runs WHERE state != 'gone'")?;
        let rows = st.query_map([], |r| {
            Ok(RunRow {
                handle: r.get(0)?,
                job_id: r.get(1)?,
                attempt: r.get(2)?,
                state: parse_run_state(&r.get::<_, String>(3)?),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every run of a job (tests and diagnostics).
    pub fn runs_of(&self, job_id: i64) -> Result<Vec<RunRow>, DaemonError> {
        let mut st = self.conn.prepare(
            "SELECT handle, job_id, attempt, state FROM runs WHERE job_id = ?1 ORDER BY attempt",
        )?;
        let rows = st.query_map([job_id], |r| {
            Ok(RunRow {
                handle: r.get(0)?,
                job_id: r.get(1)?,
                attempt: r.get(2)?,
                state: parse_run_state(&r.get::<_, String>(3)?),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// History of a job, oldest first.
    pub fn transitions(&self, job_id: i64) -> Result<Vec<TransitionRow>, DaemonError> {
        let mut st = self.conn.prepare_cached(
            "SELECT at_us, from_state, to_state, detail FROM transitions WHERE job_id = ?1 ORDER BY seq",
        )?;
        let rows = st.query_map([job_id], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, Option<String>>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (at, from, to, detail) = row?;
            out.push(TransitionRow {
                job_id,
                at_us: at.max(0) as u64,
                from: from.as_deref().and_then(JobState::parse),
                to: JobState::parse(&to).ok_or_else(|| bad(format!("transition state {to:?}")))?,
                detail,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_model::{Bytes, MilliCpu};

    pub(crate) fn row(id: i64) -> JobRow {
        JobRow {
            id,
            tenant: "alice".into(),
            queue: "alice".into(),
            name: format!("j{id}"),
            spec_json: "{}".into(),
            state: JobState::Pending,
            priority: 0,
            submit_us: 1,
            start_us: None,
            end_us: None,
            attempt: 0,
            placement: vec![],
            plan: None,
            handle: None,
            exit_code: None,
            message: None,
            progress_iters: 0,
            samples_per_sec: None,
            iters_per_sec: None,
            progress_us: None,
            attained_gpu_secs: 0.0,
            preemptions: 0,
            job_token_sha256: None,
            backend_state: None,
        }
    }

    /// Issue 9: listing is a store query; every filter narrows it and pages follow ids.
    #[test]
    fn lists_jobs_by_tenant_state_queue_and_page() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("t.db"), SyncMode::Normal).unwrap();
        let mut batch = WriteBatch::default();
        for id in 1..=20 {
            let mut j = row(id);
            if id % 2 == 0 {
                j.tenant = "bob".into();
            }
            if id % 3 == 0 {
                j.state = JobState::Completed;
            }
            if id % 5 == 0 {
                j.queue = "special".into();
            }
            batch.jobs.push(j);
        }
        s.commit(&batch).unwrap();
        let ids = |q: JobQuery| -> Vec<i64> {
            s.list_jobs(&q).unwrap().into_iter().map(|r| r.id).collect()
        };
        let all = JobQuery {
            limit: 100,
            ..JobQuery::default()
        };
        assert_eq!(ids(all.clone()), (1..=20).collect::<Vec<_>>());
        let alice = JobQuery {
            tenant: Some("alice".into()),
            ..all.clone()
        };
        assert_eq!(ids(alice.clone()), vec![1, 3, 5, 7, 9, 11, 13, 15, 17, 19]);
        let done = JobQuery {
            state: Some(JobState::Completed),
            ..alice.clone()
        };
        assert_eq!(ids(done), vec![3, 9, 15]);
        let special = JobQuery {
            queue: Some("special".into()),
            ..alice.clone()
        };
        assert_eq!(ids(special), vec![5, 15]);
        let page = JobQuery {
            after: Some(7),
            limit: 3,
            ..alice
        };
        assert_eq!(ids(page), vec![9, 11, 13]);
        let one = JobQuery { id: Some(4), ..all };
        assert_eq!(ids(one), vec![4]);
        assert_eq!(s.job(4).unwrap().map(|r| r.tenant), Some("bob".into()));
        assert_eq!(s.job(99).unwrap(), None);
    }

    #[test]
    fn a_launch_given_up_in_flight_stays_open_until_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let mut s = Store::open(&path, SyncMode::Full).unwrap();
        let placeholder = RunRow {
            handle: "launching:tessera-x-1-1".into(),
            job_id: 1,
            attempt: 1,
            state: RunState::Launching,
        };
        s.commit(&WriteBatch {
            runs: vec![placeholder.clone()],
            ..WriteBatch::default()
        })
        .unwrap();
        drop(s);
        let mut s = Store::open(&path, SyncMode::Full).unwrap();
        assert_eq!(s.open_runs().unwrap(), vec![placeholder.clone()]);
        s.commit(&WriteBatch {
            runs: vec![RunRow {
                state: RunState::Gone,
                ..placeholder
            }],
            ..WriteBatch::default()
        })
        .unwrap();
        assert_eq!(s.open_runs().unwrap(), vec![]);
    }

    #[test]
    fn round_trips_jobs_runs_and_history() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let mut s = Store::open(&path, SyncMode::Full).unwrap();
        let mut j = row(1);
        let mut batch = WriteBatch::default();
        batch.jobs.push(j.clone());
        batch.transitions.push(TransitionRow {
            job_id: 1,
            at_us: 1,
            from: None,
            to: JobState::Pending,
            detail: "submitted".into(),
        });
        s.commit(&batch).unwrap();
        j.state = JobState::Running;
        j.handle = Some("42".into());
        j.placement = vec![PlacedShare {
            node: "n1".into(),
            gres_type: Some("a100".into()),
            gpus: 2,
            cpu: MilliCpu(16_000),
            memory: Bytes(1 << 30),
            devices: Some(crate::core::runs::PlacedDevices {
                indices: vec![1, 3],
                part: crate::core::runs::PlacedPart::Quota {
                    sm_request: 300,
                    sm_limit: 500,
                    memory: Bytes(1 << 33),
                },
            }),
        }];
        j.plan = Some(ParallelPlan {
            data: 1,
            tensor: 2,
            pipeline: 1,
        });
        let batch = WriteBatch {
            jobs: vec![j.clone()],
            transitions: vec![TransitionRow {
                job_id: 1,
                at_us: 2,
                from: Some(JobState::Pending),
                to: JobState::Running,
                detail: "started".into(),
            }],
            runs: vec![RunRow {
                handle: "42".into(),
                job_id: 1,
                attempt: 1,
                state: RunState::Live,
            }],
            ..WriteBatch::default()
        };
        s.commit(&batch).unwrap();
        drop(s);
        let s = Store::open(&path, SyncMode::Normal).unwrap();
        assert_eq!(s.load_jobs().unwrap(), vec![j.clone()]);
        assert_eq!(s.transitions(1).unwrap().len(), 2);
        assert_eq!(s.open_runs().unwrap()[0].state, RunState::Live);
        // Without a plan the column keeps the bare list older stores hold.
        drop(s);
        let mut s = Store::open(&path, SyncMode::Normal).unwrap();
        j.plan = None;
        j.placement[0].devices = None;
        s.commit(&WriteBatch {
            jobs: vec![j.clone()],
            ..WriteBatch::default()
        })
        .unwrap();
        let raw: String = s
            .conn
            .query_row("SELECT placement FROM jobs WHERE id = 1", [], |r| r.get(0))
            .unwrap();
        assert!(raw.starts_with('['), "{raw}");
        assert_eq!(s.load_jobs().unwrap(), vec![j]);
    }

    #[test]
    fn a_second_opener_is_refused_with_the_holders_pid() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let first = Store::open(&path, SyncMode::Full).unwrap();
        let e = Store::open(&path, SyncMode::Full).unwrap_err().to_string();
        assert!(
            e.contains(&format!("pid {}", std::process::id())) && e.contains("t.db"),
            "{e}"
        );
        // Read-only inspection is still possible while the daemon holds the store.
        assert!(Store::inspect(&path)
            .unwrap()
            .load_jobs()
            .unwrap()
            .is_empty());
        drop(first);
        Store::open(&path, SyncMode::Full).expect("free again once the holder is gone");
    }

    #[test]
    fn a_second_opener_through_a_symlink_a_hard_link_or_without_the_note_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let first = Store::open(&path, SyncMode::Full).unwrap();
        let symlink = dir.path().join("via-symlink.db");
        std::os::unix::fs::symlink(&path, &symlink).unwrap();
        let hard = dir.path().join("via-hardlink.db");
        std::fs::hard_link(&path, &hard).unwrap();
        for other in [&symlink, &hard] {
            let e = Store::open(other, SyncMode::Full).unwrap_err().to_string();
            assert!(
                e.contains("in use by another tessera daemon")
                    && e.contains(&format!("pid {}", std::process::id())),
                "{}: {e}",
                other.display()
            );
        }
        std::fs::remove_file(lock_path(&path)).unwrap();
        let e = Store::open(&path, SyncMode::Full).unwrap_err().to_string();
        assert!(e.contains("in use by another tessera daemon"), "{e}");
        drop(first);
        Store::open(&hard, SyncMode::Full).expect("free again once the holder is gone");
    }

    #[test]
    fn an_empty_store_file_is_refused_not_started_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        {
            let mut s = Store::open(&path, SyncMode::Full).unwrap();
            let mut batch = WriteBatch::default();
            batch.jobs.push(row(1));
            s.commit(&batch).unwrap();
        }
        std::fs::File::create(&path).unwrap(); // truncated to 0 bytes
        let e = Store::open(&path, SyncMode::Full).unwrap_err().to_string();
        assert!(
            e.contains(&path.display().to_string()) && e.contains("empty (0 bytes)"),
            "{e}"
        );
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "left untouched");
    }

    #[test]
    fn the_store_and_its_journal_are_private_to_the_daemon_user() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let mode = |suffix: &str| {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            std::fs::metadata(std::path::PathBuf::from(name))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        {
            let mut s = Store::open(&path, SyncMode::Full).unwrap();
            let mut batch = WriteBatch::default();
            batch.jobs.push(row(1));
            s.commit(&batch).unwrap();
            for suffix in ["", "-wal", "-shm", ".lock"] {
                assert_eq!(mode(suffix), 0o600, "{suffix}");
            }
        }
        // A store an earlier version left world-readable is made private when opened.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let _s = Store::open(&path, SyncMode::Full).unwrap();
        assert_eq!(mode(""), 0o600);
    }

    #[test]
    fn a_garbage_file_error_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("garbage.db");
        std::fs::write(&path, vec![0xA5u8; 8192]).unwrap();
        let e = Store::open(&path, SyncMode::Full).unwrap_err().to_string();
        assert!(e.contains(&path.display().to_string()), "{e}");
    }

    #[test]
    fn a_foreign_sqlite_file_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("other-app.db");
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch("CREATE TABLE photos (id INTEGER PRIMARY KEY, path TEXT);")
                .unwrap();
        }
        let before = std::fs::read(&path).unwrap();
        let e = Store::open(&path, SyncMode::Full).unwrap_err().to_string();
        assert!(
            e.contains(&path.display().to_string()) && e.contains("not a tessera store"),
            "{e}"
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "the file was modified"
        );
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("other-app.db") && !n.ends_with(".lock"))
            .collect();
        assert_eq!(
            names,
            vec!["other-app.db".to_string()],
            "no WAL or journal beside it"
        );
    }

    #[test]
    fn rejects_foreign_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("junk.db");
        std::fs::write(
            &path,
            b"this is not a database, just junk bytes of some length........",
        )
        .unwrap();
        assert!(Store::open(&path, SyncMode::Full).is_err());
    }
}
