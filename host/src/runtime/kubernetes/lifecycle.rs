//! A pod's life as the API server tells it: waiting until it runs (failing as soon as it
//! cannot), and deleting it until the kubelet confirms its containers are gone.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, WatchEvent, WatchParams};

use super::status::{judge, turned_away};
use super::{KubernetesRuntime, kube_error};
use crate::{Error, Result};

/// How long a deleted pod may take to be gone.
const DELETE_TIMEOUT: Duration = Duration::from_secs(180);

/// How a pod's start ended.
pub(super) enum Started {
    Running(Box<Pod>),
    /// The node turned it away before it ran ([`super::status::turned_away`]): why.
    TurnedAway(String),
}

/// The pod's start, once it is decided.
fn decided(p: &Pod) -> Result<Option<Started>> {
    if let Some(why) = turned_away(p) {
        return Ok(Some(Started::TurnedAway(why)));
    }
    Ok(judge(p)?.map(|p| Started::Running(Box::new(p))))
}

impl KubernetesRuntime {
    /// Waits until pod `name` runs, from `version` on; fails as soon as it cannot.
    pub(super) async fn until_running(&self, name: &str, version: &str) -> Result<Started> {
        let params = WatchParams::default().fields(&format!("metadata.name={name}"));
        let mut version = version.to_string();
        loop {
            // A pod that runs already (its events came before the watch) is taken at once.
            if let Some(p) = self
                .pods
                .get_opt(name)
                .await
                .map_err(kube_error("reading the pod"))?
            {
                if let Some(done) = decided(&p)? {
                    return Ok(done);
                }
                version = p.metadata.resource_version.clone().unwrap_or(version);
            } else {
                return Err(Error::Unavailable(format!(
                    "the workspace's pod {name} was deleted while it started"
                )));
            }
            let mut events = self
                .pods
                .watch(&params, &version)
                .await
                .map_err(kube_error("watching the pod"))?
                .boxed();
            while let Some(event) = events
                .try_next()
                .await
                .map_err(kube_error("watching the pod"))?
            {
                match event {
                    WatchEvent::Added(p) | WatchEvent::Modified(p) => {
                        if let Some(done) = decided(&p)? {
                            return Ok(done);
                        }
                    }
                    WatchEvent::Deleted(_) => {
                        return Err(Error::Unavailable(format!(
                            "the workspace's pod {name} was deleted while it started"
                        )));
                    }
                    // Too old a version, or the watch ended: read it again and go on.
                    WatchEvent::Error(_) | WatchEvent::Bookmark(_) => break,
                }
            }
        }
    }

    pub(super) async fn delete(&self, name: &str) -> Result<()> {
        // Not forced (a grace of 0 would drop the object before the kubelet killed anything):
        // the pod is gone once the kubelet confirms its containers are.
        let params = DeleteParams {
            grace_period_seconds: Some(1),
            ..DeleteParams::default()
        };
        match self.pods.delete(name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(kube_error("stopping the workspace's pod")(e)),
        }
        // Gone once the API server no longer has it: the kubelet confirmed its containers died.
        // A busy node confirms late (seen past a minute on the two-core test node while another
        // pod filled its disk and was evicted).
        let deadline = tokio::time::Instant::now() + DELETE_TIMEOUT;
        let params = WatchParams::default().fields(&format!("metadata.name={name}"));
        loop {
            let Some(p) = self
                .pods
                .get_opt(name)
                .await
                .map_err(kube_error("reading the pod"))?
            else {
                return Ok(());
            };
            let version = p.metadata.resource_version.unwrap_or_default();
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Err(Error::Unavailable(format!(
                    "the workspace's pod {name} is still there {} s after it was deleted: see `kubectl describe pod {name}` (its node may be unreachable)",
                    DELETE_TIMEOUT.as_secs()
                )));
            }
            let mut events = self
                .pods
                .watch(&params, &version)
                .await
                .map_err(kube_error("watching the pod"))?
                .boxed();
            let gone = tokio::time::timeout(left, async {
                while let Ok(Some(e)) = events.try_next().await {
                    if matches!(e, WatchEvent::Deleted(_)) {
                        return true;
                    }
                }
                false
            })
            .await
            .unwrap_or(false);
            if gone {
                return Ok(());
            }
        }
    }
}
