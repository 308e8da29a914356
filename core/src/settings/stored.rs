//! Settings an admin keeps as one JSON value under a key of the settings table (the action
//! policy, the price table, the budgets), read and replaced whole, audited.

use crate::db::Db;
use crate::{Error, Result};

/// A JSON value an admin stored under `key` in the settings table (its default when none is).
pub async fn stored<T: serde::de::DeserializeOwned + Default>(db: &Db, key: &str) -> Result<T> {
    for (k, v) in crate::db::settings::all(db).await? {
        if k == key {
            return serde_json::from_str(&v)
                .map_err(|e| Error::Internal(format!("the stored {key} is unreadable: {e}")));
        }
    }
    Ok(T::default())
}

/// Stores `value` under `key` by `by`, audited as `action`, in one transaction.
pub async fn store<T: serde::Serialize>(
    db: &Db,
    key: &str,
    value: &T,
    by: &str,
    action: &str,
) -> Result<()> {
    let json = serde_json::to_string(value).map_err(|e| Error::Internal(e.to_string()))?;
    let now = crate::now_ms();
    let mut tx = db.begin().await?;
    crate::db::settings::put(&mut tx, key, &json, now, by).await?;
    crate::db::audit::record(
        &mut tx,
        now,
        crate::db::audit::Entry {
            actor_user_id: None,
            actor_name: by,
            action,
            target: key,
            detail: serde_json::to_value(value).unwrap_or_default(),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(())
}
