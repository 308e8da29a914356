//! A live member's access, checked again while it is connected: the connection closes (4403)
//! the moment its holder may no longer see the session.

use std::time::Duration;

use tandem_protocol::live::*;

use super::hub::Outbox;
use crate::sessions::access::Access;
use crate::state::AppState;
use crate::{Error, sessions};

/// How often a connection checks that its holder may still see the session.
const ACCESS_RECHECK: Duration = Duration::from_secs(5);

/// Closes the connection (4403) once its holder may no longer see the session: deactivated, the
/// session made private, the repo's access changed, the link revoked, its maker deactivated.
pub(super) async fn recheck(
    state: AppState,
    session: tandem_protocol::Session,
    access: Access,
    out: Outbox,
) {
    let mut tick = tokio::time::interval(ACCESS_RECHECK);
    tick.tick().await;
    loop {
        tick.tick().await;
        let person = match access.user_id {
            Some(id) => match crate::commands::active_person(&state.db, id).await {
                Ok(Some(u)) => Some(u),
                Ok(_) => {
                    out.close(close::FORBIDDEN);
                    return;
                }
                Err(_) => continue,
            },
            None => None,
        };
        let still = match (&access.jti, &person) {
            (Some(jti), _) => sessions::access::link_by_id(&state.db, session.id, jti)
                .await
                .map(|_| ())
                .map_err(Error::from),
            // Read again: it may have been made private since.
            (None, Some(u)) => crate::permissions::require(&state, session.id, u, Role::Viewer)
                .await
                .map(|_| ())
                .map_err(Error::from),
            (None, None) => Err(Error::Unauthorized("nobody".into())),
        };
        match still {
            Ok(()) => {}
            // The store answering badly is not the person losing access.
            Err(Error::Internal(_)) | Err(Error::Store(_)) => {}
            Err(_) => {
                out.close(close::FORBIDDEN);
                return;
            }
        }
    }
}
