//! Tandem's store: the only crate that knows SQL (and depends on sqlx). One code path for
//! SQLite (embedded default) and PostgreSQL (multi-node) through sqlx's `Any` driver; queries
//! use `$n` parameters, which both accept, and the two migration sets in `migrations/` keep the
//! same column types. Rows come back as `tandem-protocol` types; it depends on nothing of the
//! server (which reaches it as `db`).

use std::str::FromStr;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Executor};

pub use bus::EventBus;
pub use error::{Error, Result};

pub mod approvals;
pub mod artifacts;
pub mod audit;
pub mod automations;
pub mod bus;
pub mod diffs;
pub mod error;
pub mod events;
pub mod fixture;
pub mod flows;
pub mod followers;
pub mod github;
pub mod insights;
pub mod issues;
pub mod links;
pub mod mcp_servers;
pub mod page_rules;
pub mod pairings;
pub mod people;
pub mod prompts;
pub mod repos;
pub mod revoked;
pub mod secrets;
pub mod servers;
pub mod sessions;
pub mod settings;
pub mod slack;
pub mod snapshots;
pub mod spend;
pub mod tokens;
pub mod trees;
pub mod usage;
pub mod users;

static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");
static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

/// Which database is behind the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// `"sqlite"` or `"postgres"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        }
    }
}

/// A connection pool plus the backend it talks to.
#[derive(Clone, Debug)]
pub struct Db {
    pool: AnyPool,
    backend: Backend,
    /// SQLite has one writer at a time; write transactions queue here, in order, instead of in
    /// SQLite's busy handler (which sleeps in growing steps and makes the latency tail).
    writer: Option<std::sync::Arc<tokio::sync::Mutex<()>>>,
    /// Tells live subscribers that a session has new events (after the commit).
    bus: std::sync::Arc<EventBus>,
}

/// A write transaction ([`Db::begin`]); rolls back unless committed.
pub struct Tx {
    tx: sqlx::Transaction<'static, sqlx::Any>,
    _writer: Option<tokio::sync::OwnedMutexGuard<()>>,
    bus: std::sync::Arc<EventBus>,
    backend: Backend,
    /// Events appended in this transaction, announced once it commits.
    appended: Vec<(tandem_protocol::SessionId, i64)>,
}

/// Where a query runs: the pool (`&Db`) or an open transaction (`&mut Tx`). Every query
/// function takes one, so callers never see sqlx's types.
pub trait Conn: Send {
    /// The executor to run one query on.
    fn ex(&mut self) -> impl sqlx::Executor<'_, Database = sqlx::Any>;
}

impl Conn for &Db {
    fn ex(&mut self) -> impl sqlx::Executor<'_, Database = sqlx::Any> {
        &self.pool
    }
}

impl Conn for &mut Tx {
    fn ex(&mut self) -> impl sqlx::Executor<'_, Database = sqlx::Any> {
        &mut *self.tx
    }
}

impl Tx {
    /// The transaction's sqlx connection, for benchmarks and tests that write rows directly
    /// (like [`Db::raw_pool`], never the server's).
    pub fn raw(&mut self) -> &mut sqlx::AnyConnection {
        &mut self.tx
    }

    pub async fn commit(mut self) -> Result<()> {
        if self.backend == Backend::Postgres && !self.appended.is_empty() {
            // Delivered to the other processes when (and only if) the commit happens.
            let mut newest = std::collections::HashMap::new();
            for (session, seq) in &self.appended {
                let n = newest.entry(*session).or_insert(*seq);
                *n = (*n).max(*seq);
            }
            for (session, seq) in newest {
                sqlx::query("SELECT pg_notify($1, $2)")
                    .bind(bus::EVENTS_CHANNEL)
                    .bind(bus::event_payload(session, seq))
                    .execute(&mut *self.tx)
                    .await?;
            }
        }
        self.tx.commit().await?;
        for (session, seq) in self.appended {
            self.bus.publish(session, seq);
        }
        Ok(())
    }

    /// Notes an event appended in this transaction.
    pub(crate) fn appended(&mut self, session: tandem_protocol::SessionId, seq: i64) {
        self.appended.push((session, seq));
    }

    /// Rolls back now (dropping a transaction rolls it back later, holding SQLite's lock).
    pub async fn rollback(self) -> Result<()> {
        self.tx.rollback().await?;
        Ok(())
    }
}

impl Db {
    /// Connects to `sqlite://…` or `postgres://…` (SQLite files are created if missing).
    pub async fn connect(url: &str) -> Result<Self> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Backend::Postgres
        } else {
            return Err(Error::Config(format!(
                "database URL must start with sqlite: or postgres:, got {:?}",
                url.split(':').next().unwrap_or_default()
            )));
        };
        let options = AnyConnectOptions::from_str(url)?;
        let mut pool = AnyPoolOptions::new().acquire_timeout(Duration::from_secs(10));
        if backend == Backend::Sqlite {
            pool = pool.max_connections(8).after_connect(|conn, _meta| {
                Box::pin(async move {
                    // WAL lets readers run beside the one writer; the busy timeout makes a
                    // second writer wait instead of failing.
                    conn.execute("PRAGMA journal_mode = WAL").await?;
                    conn.execute("PRAGMA foreign_keys = ON").await?;
                    conn.execute("PRAGMA busy_timeout = 10000").await?;
                    conn.execute("PRAGMA synchronous = NORMAL").await?;
                    // 32 MiB of pages per connection (the default is 2 MiB): a read over many
                    // rows (the insights page) stays in memory instead of in read(2) calls.
                    conn.execute("PRAGMA cache_size = -32768").await?;
                    // Checkpoints run in the background (below), not inside some writer's commit.
                    conn.execute("PRAGMA wal_autocheckpoint = 0").await?;
                    Ok(())
                })
            });
        } else {
            pool = pool.max_connections(16).after_connect(|conn, _meta| {
                Box::pin(async move {
                    // Tandem's queries are short: compiling one (JIT) costs far more than it
                    // saves (half a second on the insights query over 20,000 sessions).
                    conn.execute("SET jit = off").await?;
                    Ok(())
                })
            });
        }
        let pool = pool.connect_with(options).await?;
        let writer =
            (backend == Backend::Sqlite).then(|| std::sync::Arc::new(tokio::sync::Mutex::new(())));
        if backend == Backend::Sqlite {
            tokio::spawn(checkpoints(pool.clone()));
        }
        let bus = std::sync::Arc::new(EventBus::default());
        if backend == Backend::Postgres {
            bus.listen(url);
        }
        Ok(Self {
            pool,
            backend,
            writer,
            bus,
        })
    }

    /// Applies the backend's pending migrations.
    pub async fn migrate(&self) -> Result<()> {
        match self.backend {
            Backend::Sqlite => SQLITE_MIGRATIONS.run(&self.pool).await?,
            Backend::Postgres => POSTGRES_MIGRATIONS.run(&self.pool).await?,
        }
        Ok(())
    }

    /// Sets what is told of every event this process appends ([`EventBus::observe`]).
    pub fn observe(&self, f: bus::Observer) {
        self.bus.observe(f);
    }

    /// Tells the observer of something this process measured.
    pub fn observed(&self, what: bus::Observation<'_>) {
        self.bus.observed(what);
    }

    /// Which database this is.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Begins a write transaction (on SQLite, after the one before it ends).
    pub async fn begin(&self) -> Result<Tx> {
        let writer = match &self.writer {
            Some(m) => Some(m.clone().lock_owned().await),
            None => None,
        };
        let tx = match self.backend {
            // Takes SQLite's write lock now: a deferred transaction that reads first and then
            // writes fails outright (SQLITE_BUSY_SNAPSHOT, 517; the busy timeout does not
            // apply) when a plain statement on another connection wrote in between.
            Backend::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await?,
            Backend::Postgres => self.pool.begin().await?,
        };
        Ok(Tx {
            tx,
            _writer: writer,
            bus: self.bus.clone(),
            backend: self.backend,
            appended: Vec::new(),
        })
    }

    /// Watches a session's newest committed event ([`EventBus`]).
    pub fn subscribe(
        &self,
        session: tandem_protocol::SessionId,
    ) -> tokio::sync::watch::Receiver<i64> {
        self.bus.subscribe(session)
    }

    /// Control messages from this process and, on PostgreSQL, every other one sharing the
    /// database.
    pub fn control(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.bus.control()
    }

    /// Sends a control message to every process sharing the database (on SQLite: this one).
    pub async fn send_control(&self, msg: &str) -> Result<()> {
        match self.backend {
            Backend::Postgres => {
                sqlx::query("SELECT pg_notify($1, $2)")
                    .bind(bus::CONTROL_CHANNEL)
                    .bind(msg)
                    .execute(&self.pool)
                    .await?;
            }
            Backend::Sqlite => self.bus.deliver_control(msg.to_string()),
        }
        Ok(())
    }

    /// The sqlx pool itself, for tests that tamper with stored rows directly (the server
    /// passes a `&Db` to the query functions and never uses this; the tidy test keeps it so).
    pub fn raw_pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Answers when the database does.
    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Closes every connection (waits for them to be returned).
    pub async fn close(&self) {
        self.bus.stop();
        self.pool.close().await;
    }
}

/// How often SQLite's write-ahead log is folded into the database file.
pub const CHECKPOINT_EVERY: Duration = Duration::from_millis(500);

/// Folds the WAL back into the database in the background (passive: never blocks a writer),
/// until the pool closes.
async fn checkpoints(pool: AnyPool) {
    let mut tick = tokio::time::interval(CHECKPOINT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if pool.is_closed() {
            return;
        }
        if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
            .execute(&pool)
            .await
        {
            tracing::debug!(error = %e, "a WAL checkpoint failed");
        }
    }
}

/// Parses a UUID column, reporting corruption as an internal error.
pub(crate) fn uuid(s: &str) -> Result<uuid::Uuid> {
    uuid::Uuid::parse_str(s)
        .map_err(|e| Error::Internal(format!("stored id {s:?} is not a UUID: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::Connection as _;

    /// A write transaction holds SQLite's write lock from its start, so a plain statement on
    /// another connection cannot write between its read and its write (which would fail the
    /// transaction with SQLITE_BUSY_SNAPSHOT, beyond the busy timeout's help).
    #[tokio::test]
    async fn a_write_transaction_holds_sqlites_write_lock_from_its_start() {
        let path = std::env::temp_dir().join(format!("tandem-store-{}.db", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let db = Db::connect(&format!("sqlite://{}?mode=rwc", path.display()))
            .await
            .unwrap();
        sqlx::query("CREATE TABLE t (n INTEGER)")
            .execute(db.raw_pool())
            .await
            .unwrap();
        let mut tx = db.begin().await.unwrap();
        let before: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM t")
            .fetch_one(tx.raw())
            .await
            .unwrap();
        let mut other = db.raw_pool().acquire().await.unwrap().detach();
        sqlx::query("PRAGMA busy_timeout = 0")
            .execute(&mut other)
            .await
            .unwrap();
        let between = sqlx::query("INSERT INTO t (n) VALUES (2)")
            .execute(&mut other)
            .await;
        let busy =
            between.expect_err("a plain write got in between the transaction's read and write");
        assert!(busy.to_string().contains("locked"), "{busy}");
        sqlx::query("INSERT INTO t (n) VALUES (1)")
            .execute(tx.raw())
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let after: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM t")
            .fetch_one(db.raw_pool())
            .await
            .unwrap();
        assert_eq!((before, after), (0, 1));
        other.close().await.unwrap();
        db.close().await;
        let _ = std::fs::remove_file(&path);
    }
}
