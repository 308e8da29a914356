//! The store: the only module that knows SQL. One code path for SQLite (embedded default) and
//! PostgreSQL (multi-node) through sqlx's `Any` driver; queries use `$n` parameters, which both
//! accept, and the two migration sets in `migrations/` keep the same column types.

use std::str::FromStr;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Executor};

use crate::{Error, Result};

pub mod artifacts;
pub mod audit;
pub mod events;
pub mod prompts;
pub mod repos;
pub mod secrets;
pub mod sessions;
pub mod snapshots;
pub mod tokens;
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
                    Ok(())
                })
            });
        } else {
            pool = pool.max_connections(16);
        }
        let pool = pool.connect_with(options).await?;
        Ok(Self { pool, backend })
    }

    /// Applies the backend's pending migrations.
    pub async fn migrate(&self) -> Result<()> {
        match self.backend {
            Backend::Sqlite => SQLITE_MIGRATIONS.run(&self.pool).await?,
            Backend::Postgres => POSTGRES_MIGRATIONS.run(&self.pool).await?,
        }
        Ok(())
    }

    /// Which database this is.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The pool, for the query modules.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Answers when the database does.
    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Closes every connection (waits for them to be returned).
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Parses a UUID column, reporting corruption as an internal error.
pub(crate) fn uuid(s: &str) -> Result<uuid::Uuid> {
    uuid::Uuid::parse_str(s).map_err(|e| Error::Internal(format!("stored id {s:?} is not a UUID: {e}")))
}
