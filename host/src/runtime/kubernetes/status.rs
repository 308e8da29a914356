//! What a pod's status says: whether it runs, why it does not, which start it is, and a
//! command's exit code and output as the API server's exec reports them.

use k8s_openapi::api::core::v1::Pod;
use tokio::io::AsyncReadExt;

use super::pod;
use crate::runtime::MAX_EXEC_OUTPUT;
use crate::{Error, Result};

/// The pod once it runs (`Some`), `None` while it may still, or why it never will.
pub(super) fn judge(p: &Pod) -> Result<Option<Pod>> {
    let phase = p
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending");
    match phase {
        "Running" if running(p) => Ok(Some(p.clone())),
        "Failed" | "Succeeded" => Err(Error::Unavailable(format!(
            "the workspace's pod ended as it started ({phase}: {})",
            waiting_reason(p).unwrap_or_else(|| "no reason given".into())
        ))),
        _ => match waiting_reason(p) {
            Some(r)
                if [
                    "ErrImagePull",
                    "ImagePullBackOff",
                    "InvalidImageName",
                    "CreateContainerConfigError",
                    "CreateContainerError",
                    "RunContainerError",
                ]
                .iter()
                .any(|bad| r.starts_with(bad)) =>
            {
                Err(Error::Unavailable(format!(
                    "the workspace's pod cannot start: {r}"
                )))
            }
            _ => Ok(None),
        },
    }
}

/// Whether the pod's workspace container runs (and the pod is not being deleted).
pub(super) fn running(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().is_some_and(|s| {
            s.phase.as_deref() == Some("Running")
                && s.container_statuses.iter().flatten().any(|c| {
                    c.name == pod::CONTAINER
                        && c.state.as_ref().is_some_and(|st| st.running.is_some())
                })
        })
}

/// Why the pod is not running, as its status says.
pub(super) fn waiting_reason(p: &Pod) -> Option<String> {
    let status = p.status.as_ref()?;
    // The init container that takes the network away first (one that ended well is done).
    let init = status.init_container_statuses.iter().flatten().filter(|c| {
        c.state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .is_none_or(|t| t.exit_code != 0)
    });
    for c in init.chain(status.container_statuses.iter().flatten()) {
        let Some(state) = c.state.as_ref() else {
            continue;
        };
        if let Some(w) = &state.waiting {
            return Some(format!(
                "{}: {}",
                w.reason.clone().unwrap_or_default(),
                w.message.clone().unwrap_or_default()
            ));
        }
        if let Some(t) = &state.terminated {
            return Some(format!(
                "exited {}: {}",
                t.exit_code,
                t.reason.clone().unwrap_or_default()
            ));
        }
    }
    status.conditions.iter().flatten().find_map(|c| {
        (c.status == "False" && c.reason.is_some()).then(|| {
            format!(
                "{}: {}",
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default()
            )
        })
    })
}

/// Which start of the workspace a pod is: from its uid (a pod made again under the same name
/// has another).
pub(super) fn instance_of(p: &Pod) -> i32 {
    use sha2::Digest;
    let uid = p.metadata.uid.clone().unwrap_or_default();
    let h = sha2::Sha256::digest(uid.as_bytes());
    i32::from_be_bytes([h[0] & 0x7f, h[1], h[2], h[3]])
}

/// The command's exit code from the exec's status (`Success`, or `NonZeroExitCode` with the
/// code among its causes).
pub(super) fn exit_code(
    status: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Status>,
) -> Option<i32> {
    let s = status?;
    if s.status.as_deref() == Some("Success") {
        return Some(0);
    }
    s.details
        .as_ref()?
        .causes
        .iter()
        .flatten()
        .find(|c| c.reason.as_deref() == Some("ExitCode"))
        .and_then(|c| c.message.as_deref()?.parse().ok())
}

pub(super) async fn read_capped(r: Option<impl tokio::io::AsyncRead + Unpin>) -> (String, bool) {
    let Some(mut r) = r else {
        return (String::new(), false);
    };
    let mut kept = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let mut truncated = false;
    while let Ok(n) = r.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let room = MAX_EXEC_OUTPUT.saturating_sub(kept.len());
        kept.extend_from_slice(&buf[..n.min(room)]);
        truncated |= n > room;
    }
    (String::from_utf8_lossy(&kept).into_owned(), truncated)
}
