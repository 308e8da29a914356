//! Identifier newtypes, so a repo id can never be passed where a session id is expected.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use uuid::Uuid;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// Wraps an existing UUID.
            pub const fn from_uuid(id: Uuid) -> Self {
                Self(id)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self)
            }
        }
    };
}

id_type!(
    /// A person (or service account) known to this Tandem installation.
    UserId
);
id_type!(
    /// A long-lived API token (the secret itself is never part of the id).
    TokenId
);
id_type!(
    /// One approval asked of the people in a session (an agent's tool call paused for a driver).
    ApprovalId
);
id_type!(
    /// A git remote plus its workspace recipe.
    RepoId
);
id_type!(
    /// An immutable snapshot layer of a repo.
    SnapshotId
);
id_type!(
    /// One agent session and its workspace.
    SessionId
);
id_type!(
    /// One prompt queued in a session.
    PromptId
);

id_type!(
    /// A large output kept whole (a command's full output, a screenshot).
    ArtifactId
);

/// Milliseconds since the Unix epoch (UTC).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct Timestamp(pub i64);

/// A per-session event sequence number: 1, 2, 3, … without gaps.
pub type Seq = i64;

id_type!(
    /// An automation: a prompt a repo runs on a schedule.
    AutomationId
);
