//! A live member's access, checked again while it is connected: the connection closes (4403)
//! within about [`ACCESS_RECHECK`] + [`SHARED_FOR`] (7 s) of its holder no longer being
//! allowed to see the session (a revoked link or a deactivated person is closed at once,
//! elsewhere).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_protocol::UserId;
use tandem_protocol::live::*;

use super::hub::Outbox;
use crate::sessions::access::Access;
use crate::state::AppState;
use crate::{Error, sessions};

/// How often a connection asks whether its holder may still see the session (answered by a
/// check of the same holder made within [`SHARED_FOR`], or a new one).
const ACCESS_RECHECK: Duration = Duration::from_secs(5);

/// How long one check's answer stands for the other members who came in as the same holder.
const SHARED_FOR: Duration = Duration::from_secs(2);

/// What a check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Keep,
    Close,
}

/// Who a member came in as: a person, a link, or a person through a link.
type Holder = (Option<UserId>, Option<String>);

/// A check of one holder: when it began, and its verdict once it has one.
type Shared = (Instant, Arc<tokio::sync::OnceCell<Verdict>>);

/// A session's recent checks, by holder: the members who came in as the same holder share one
/// check per [`SHARED_FOR`] instead of one each. 2,000 guests through 20 links read the store
/// 20 times every few seconds, not 2,000 times at once (`cargo xtask bench live` at 2,000
/// viewers: 5,153 waits of over 2 s for a store connection in a run, 34 after).
#[derive(Default)]
pub struct Checks {
    recent: std::sync::Mutex<HashMap<Holder, Shared>>,
}

impl Checks {
    /// The verdict on `holder`: `check`'s, or that of a check of the same holder made less
    /// than [`SHARED_FOR`] ago (or under way).
    async fn verdict(
        &self,
        holder: Holder,
        check: impl std::future::Future<Output = Verdict>,
    ) -> Verdict {
        let cell = {
            let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            recent.retain(|_, (at, _)| now.duration_since(*at) < SHARED_FOR);
            recent
                .entry(holder)
                .or_insert_with(|| (now, Arc::default()))
                .1
                .clone()
        };
        *cell.get_or_init(|| check).await
    }
}

/// Closes the connection (4403) once its holder may no longer see the session: deactivated, the
/// session made private, the repo's access changed, the link revoked, its maker deactivated.
pub(super) async fn recheck(
    state: AppState,
    session: tandem_protocol::Session,
    access: Access,
    out: Outbox,
    checks: Arc<Checks>,
) {
    let mut tick = tokio::time::interval(ACCESS_RECHECK);
    tick.tick().await;
    loop {
        tick.tick().await;
        let holder = (access.user_id, access.jti.clone());
        if checks
            .verdict(holder, check(&state, &session, &access))
            .await
            == Verdict::Close
        {
            out.close(close::FORBIDDEN);
            return;
        }
    }
}

/// Whether `access`'s holder may still see `session`; the store answering badly is not the
/// holder losing access.
async fn check(state: &AppState, session: &tandem_protocol::Session, access: &Access) -> Verdict {
    let person = match access.user_id {
        Some(id) => match crate::commands::active_person(&state.db, id).await {
            Ok(Some(u)) => Some(u),
            Ok(_) => return Verdict::Close,
            Err(_) => return Verdict::Keep,
        },
        None => None,
    };
    let still = match (&access.jti, &person) {
        (Some(jti), _) => sessions::access::link_by_id(&state.db, session.id, jti)
            .await
            .map(|_| ())
            .map_err(Error::from),
        // Read again: it may have been made private since.
        (None, Some(u)) => crate::permissions::require(state, session.id, u, Role::Viewer)
            .await
            .map(|_| ())
            .map_err(Error::from),
        (None, None) => Err(Error::Unauthorized("nobody".into())),
    };
    // Kept for the holder's other members too (for [`SHARED_FOR`]): a store under strain is
    // not asked again by each of them.
    match still {
        Ok(()) | Err(Error::Internal(_)) | Err(Error::Store(_)) => Verdict::Keep,
        Err(_) => Verdict::Close,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn members_who_came_in_as_one_holder_share_one_check() {
        let checks = Checks::default();
        let runs = AtomicUsize::new(0);
        let check = |v: Verdict| {
            let runs = &runs;
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
                v
            }
        };
        let link = (None, Some("link-a".to_string()));
        let all = futures::future::join_all(
            (0..500).map(|_| checks.verdict(link.clone(), check(Verdict::Close))),
        )
        .await;
        assert!(all.iter().all(|v| *v == Verdict::Close));
        assert_eq!(runs.load(Ordering::SeqCst), 1, "one check for 500 members");
        // Another holder is checked on its own, and gets its own answer.
        let other = (None, Some("link-b".to_string()));
        assert_eq!(
            checks.verdict(other, check(Verdict::Keep)).await,
            Verdict::Keep
        );
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }
}
