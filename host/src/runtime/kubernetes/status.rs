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
            ended_reason(p)
                .or_else(|| waiting_reason(p))
                .unwrap_or_else(|| "no reason given".into())
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

/// Why the pod as a whole ended, as the kubelet says: it turned the pod away at admission
/// (`OutOfcpu: Node didn't have enough resource: …`) or evicted it (`Evicted: …`).
fn ended_reason(p: &Pod) -> Option<String> {
    let status = p.status.as_ref()?;
    let reason = status.reason.as_deref().filter(|r| !r.is_empty())?;
    Some(match status.message.as_deref().filter(|m| !m.is_empty()) {
        Some(m) => format!("{reason}: {m}"),
        None => reason.to_string(),
    })
}

/// The kubelet turned the pod away before any of its containers ran, for want of a resource
/// it counted as taken (`OutOfcpu`, `OutOfmemory`, `OutOfpods`, `OutOfephemeral-storage`) or
/// an admission error. The scheduler had placed it, so the count raced with a pod that was
/// ending: the same pod made again is placed anew (what a ReplicaSet would do). Its reason.
pub(super) fn turned_away(p: &Pod) -> Option<String> {
    let status = p.status.as_ref()?;
    if status.phase.as_deref() != Some("Failed") {
        return None;
    }
    let reason = status.reason.as_deref()?;
    let admission = reason.starts_with("OutOf") || reason == "UnexpectedAdmissionError";
    let ran = status
        .init_container_statuses
        .iter()
        .chain(status.container_statuses.iter())
        .flatten()
        .any(|c| {
            c.state
                .as_ref()
                .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
        });
    (admission && !ran).then(|| ended_reason(p).unwrap_or_default())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": "w" },
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_the_kubelet_turned_away_is_made_again_and_its_reason_is_told() {
        // What a v1.20 kubelet writes when its count of the node's CPU raced with a pod that
        // was ending.
        let rejected = pod(serde_json::json!({
            "phase": "Failed",
            "reason": "OutOfcpu",
            "message": "Pod Node didn't have enough resource: cpu, requested: 500, used: 1750, capacity: 2000",
        }));
        let why = turned_away(&rejected).expect("turned away");
        assert!(
            why.starts_with("OutOfcpu: Pod Node didn't have enough resource: cpu"),
            "{why}"
        );
        // Were it taken as a failed start, the error says why, not "no reason given".
        let Err(Error::Unavailable(e)) = judge(&rejected) else {
            panic!("a failed pod is a failed start")
        };
        assert!(
            e.contains("(Failed: OutOfcpu: Pod Node didn't have enough"),
            "{e}"
        );

        // Evicted is not a race: its start fails, with the kubelet's words.
        let evicted = pod(serde_json::json!({
            "phase": "Failed",
            "reason": "Evicted",
            "message": "The node was low on resource: ephemeral-storage.",
        }));
        assert!(turned_away(&evicted).is_none());
        let Err(Error::Unavailable(e)) = judge(&evicted) else {
            panic!("an evicted pod is a failed start")
        };
        assert!(
            e.contains("Evicted: The node was low on resource: ephemeral-storage."),
            "{e}"
        );

        // A pod whose workspace ran and ended is not made again behind anyone's back.
        let ran = pod(serde_json::json!({
            "phase": "Failed",
            "reason": "OutOfmemory",
            "containerStatuses": [{
                "name": "workspace", "image": "i", "imageID": "", "ready": false,
                "restartCount": 0,
                "state": { "terminated": { "exitCode": 137, "reason": "OOMKilled" } },
            }],
        }));
        assert!(turned_away(&ran).is_none());
        // Nor is one still pending.
        assert!(turned_away(&pod(serde_json::json!({ "phase": "Pending" }))).is_none());
    }
}
