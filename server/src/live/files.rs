//! The live channel's file messages: the workspace's tree, and opening, editing, following
//! and closing shared documents ([`super::docs`]). A message that breaks the protocol closes
//! its sender's channel with the code [`super::docs::DocError::Close`] names.

use std::sync::Arc;

use tandem_protocol::live::{MAX_TREE_ENTRIES, WsClient, WsServer};

use super::Live;
use super::docs::{DocError, Opener};
use super::hub::Outbox;
use crate::state::AppState;

/// The participant a message came from.
pub struct Who<'a> {
    pub id: u32,
    pub out: &'a Outbox,
    pub may_edit: bool,
    pub name: &'a str,
}

/// Does what a file message asks; `Err` is a refusal to tell the participant.
pub async fn handle(
    state: &AppState,
    live: &Arc<Live>,
    who: Who<'_>,
    m: WsClient,
) -> Result<(), String> {
    let r = match m {
        WsClient::ListFiles => {
            let tree = tree(state, live).await?;
            who.out.send(&WsServer::FileTree {
                files: tree.files,
                truncated: tree.truncated,
            });
            Ok(())
        }
        WsClient::OpenFile { path } => {
            let opener = Opener {
                member: who.id,
                out: who.out,
                may_edit: who.may_edit,
                name: who.name,
            };
            live.docs.open(state, live.session, opener, &path).await
        }
        WsClient::CloseFile { path } => {
            live.docs.close(who.id, &path);
            Ok(())
        }
        WsClient::FileUpdate { path, update } => live.docs.update(who.id, &path, &update),
        WsClient::FileAwareness { path, update } => live.docs.awareness(who.id, &path, &update),
        _ => Ok(()),
    };
    match r {
        Ok(()) => Ok(()),
        Err(DocError::Refused(why)) => Err(why),
        Err(DocError::Close(code, why)) => {
            tracing::info!(session = %live.session, member = who.id, code, %why, "closing a member for a bad document message");
            who.out.close(code);
            Ok(())
        }
    }
}

/// The workspace's files, for the Files pane.
async fn tree(state: &AppState, live: &Live) -> Result<tandem_protocol::agent::FileTree, String> {
    let host = state.workspaces().map_err(|e| e.to_string())?;
    let agent = crate::sessions::workspace::workspace_agent(&state.db, &host, live.session)
        .await
        .map_err(|e| e.to_string())?;
    let mut tree = agent.file_tree().await.map_err(|e| e.to_string())?;
    // The agent's answer is untrusted: held to the same bound it should have kept.
    if tree.files.len() > MAX_TREE_ENTRIES {
        tree.files.truncate(MAX_TREE_ENTRIES);
        tree.truncated = true;
    }
    Ok(tree)
}
