//! The Chrome extension's pairing, device style: the extension asks for a pairing and shows its
//! code; the person approves the code in the web app where they are signed in; the extension
//! polls with its device secret and takes a scoped, expiring, revocable token, once.

use serde::{Deserialize, Serialize};

use crate::CreatedToken;

/// `POST /api/extension/pairings`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartPairing {
    /// What the token will be called in the person's token list ("Chrome on laptop").
    #[serde(default)]
    pub label: Option<String>,
}

/// A pairing in flight.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pairing {
    /// The extension's secret for polling (never shown to the person).
    pub device_code: String,
    /// What the person checks and approves: `ABCD-EFGH`.
    pub user_code: String,
    /// Where the person approves it (the web app, signed in).
    pub approve_url: String,
    pub expires_in_secs: i64,
    /// Seconds between polls.
    pub interval_secs: i64,
}

/// `POST /api/extension/pairings/approve` (a signed-in person).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovePairing {
    pub user_code: String,
}

/// `POST /api/extension/pairings/poll` (the extension).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PollPairing {
    pub device_code: String,
}

/// What a poll answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum PairingPoll {
    /// Not approved yet: poll again after the interval.
    Pending,
    /// Approved: the extension's token (shown this once).
    Approved { token: CreatedToken },
}
