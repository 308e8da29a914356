//! `tandem-workspace-agent isolate-network`: what a pod's init container runs — the only
//! container of the pod with `CAP_NET_ADMIN` — before the workspace starts. Every interface of
//! the pod but loopback goes down, so the workspace has no network whatever the cluster's
//! network plugin enforces (a NetworkPolicy holds only where the plugin enforces policies); the
//! workspace's own container has no `CAP_NET_ADMIN` and cannot bring one up. The agent's
//! port-forward arrives on the pod's loopback, and egress goes through the server's proxy over
//! it, so neither needs a link.

use anyhow::{Context, Result};
use futures::TryStreamExt;
use rtnetlink::LinkUnspec;
use rtnetlink::packet_route::link::{LinkAttribute, LinkFlags};

/// Takes every interface but loopback down; says which.
pub fn network() -> Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let (connection, handle, _) =
                rtnetlink::new_connection().context("opening a netlink socket")?;
            tokio::spawn(connection);
            let links: Vec<_> = handle
                .link()
                .get()
                .execute()
                .try_collect()
                .await
                .context("listing the pod's interfaces")?;
            for link in links {
                if link.header.flags.contains(LinkFlags::Loopback) {
                    continue;
                }
                let name = link
                    .attributes
                    .iter()
                    .find_map(|a| match a {
                        LinkAttribute::IfName(n) => Some(n.clone()),
                        _ => None,
                    })
                    .unwrap_or_else(|| link.header.index.to_string());
                let index = link.header.index;
                let down = handle
                    .link()
                    .set(LinkUnspec::new_with_index(index).down().build())
                    .execute()
                    .await;
                match down {
                    Ok(()) => println!("{name}: down"),
                    // A netlink without RTM_SETLINK (gVisor's): the link goes altogether.
                    Err(e) => {
                        handle.link().del(index).execute().await.with_context(|| {
                            format!("taking {name} down ({e}), then deleting it")
                        })?;
                        println!("{name}: deleted (it could not be taken down: {e})");
                    }
                }
            }
            Ok(())
        })
}
