//! The installation's isolation policy (a NetworkPolicy giving its workspace pods no network)
//! and the owner reference every workspace pod carries to it: removing the policy — tearing the
//! installation down — has the cluster's garbage collector remove every workspace pod, and no
//! pod runs long without the policy that isolates it.

use std::time::{Duration, Instant};

use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Api;
use kube::api::PostParams;

use super::{Settings, bounded, pod};
use crate::{Error, Result};

/// The policy, made on start-up, and its uid as last read.
pub struct Isolation {
    policies: Api<NetworkPolicy>,
    policy: NetworkPolicy,
    recheck: Duration,
    owner: tokio::sync::Mutex<Option<(OwnerReference, Instant)>>,
}

impl Isolation {
    /// Makes the policy, or brings an existing one to what this version writes.
    pub async fn ensure(policies: Api<NetworkPolicy>, settings: &Settings) -> Result<Self> {
        let policy: NetworkPolicy = serde_json::from_value(pod::isolation(settings))
            .map_err(|e| Error::Internal(format!("the isolation policy: {e}")))?;
        let name = pod::isolation_name(settings);
        let made = match bounded(
            "making the isolation policy",
            policies.create(&PostParams::default(), &policy),
        )
        .await
        {
            Ok(made) => made,
            Err(Error::Conflict(_)) => {
                let mut p = policy.clone();
                p.metadata.resource_version =
                    bounded("reading the isolation policy", policies.get(&name))
                        .await?
                        .metadata
                        .resource_version;
                bounded(
                    "updating the isolation policy",
                    policies.replace(&name, &PostParams::default(), &p),
                )
                .await?
            }
            Err(e) => return Err(e),
        };
        let owner = owner_of(&made)?;
        Ok(Self {
            policies,
            policy,
            recheck: settings.policy_recheck,
            owner: tokio::sync::Mutex::new(Some((owner, Instant::now()))),
        })
    }

    /// The policy as a pod's owner: its uid as read within [`Settings::policy_recheck`]; the policy made again
    /// when someone deleted it (the pods it owned went with it).
    pub async fn owner(&self) -> Result<OwnerReference> {
        let mut cached = self.owner.lock().await;
        if let Some((owner, read)) = cached.as_ref()
            && read.elapsed() < self.recheck
        {
            return Ok(owner.clone());
        }
        let name = self.policy.metadata.name.clone().unwrap_or_default();
        let policy = match bounded("reading the isolation policy", self.policies.get_opt(&name))
            .await?
        {
            Some(p) => p,
            None => {
                tracing::warn!(policy = %name, "the workspaces' isolation policy was gone: made again");
                match bounded(
                    "making the isolation policy",
                    self.policies.create(&PostParams::default(), &self.policy),
                )
                .await
                {
                    Ok(p) => p,
                    // Another replica made it first.
                    Err(Error::Conflict(_)) => {
                        bounded("reading the isolation policy", self.policies.get(&name)).await?
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        let owner = owner_of(&policy)?;
        *cached = Some((owner.clone(), Instant::now()));
        Ok(owner)
    }
}

fn owner_of(policy: &NetworkPolicy) -> Result<OwnerReference> {
    let uid = policy
        .metadata
        .uid
        .clone()
        .ok_or_else(|| Error::Unavailable("the isolation policy has no uid yet".into()))?;
    Ok(OwnerReference {
        api_version: "networking.k8s.io/v1".into(),
        kind: "NetworkPolicy".into(),
        name: policy.metadata.name.clone().unwrap_or_default(),
        uid,
        ..Default::default()
    })
}
