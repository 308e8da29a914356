//! The store's one error type.

/// What can go wrong reading or writing the store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The row asked for is not there.
    #[error("{0}")]
    NotFound(String),
    /// The database URL or settings are wrong.
    #[error("configuration: {0}")]
    Config(String),
    /// Something stored does not read back (an unknown state, a malformed id).
    #[error("{0}")]
    Internal(String),
    #[error("database: {0}")]
    Sqlx(#[from] sqlx::Error),
    #[error("database migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

/// `Result` with the store's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether a unique constraint refused the write (the row exists already).
    pub fn is_unique_violation(&self) -> bool {
        matches!(self, Self::Sqlx(sqlx::Error::Database(d)) if d.is_unique_violation())
    }
}
