//! Images that come with a prompt from where it was written (a Slack message and its thread):
//! checked to be PNGs within the page screenshots' bounds, kept as the session's artifacts
//! (counted against the same per-session cap), shown in the timeline, and given to the turn —
//! to the builtin agent as image parts, to others as files under `agent::CONTEXT_DIR`.

use base64::Engine;
use tandem_protocol::agent::{CONTEXT_DIR, TurnImage};
use tandem_protocol::limits::{
    MAX_CONTEXT_BYTES_PER_SESSION, MAX_SCREENSHOT_BYTES, MAX_SCREENSHOT_PIXELS, MAX_SCREENSHOT_SIDE,
};
use tandem_protocol::*;

use crate::db::{self, Db};
use crate::page_context::png_size;
use crate::{Result, now_ms};

/// The most images one prompt takes.
pub const MAX_IMAGES: usize = 4;

/// One line of at most 80 characters, for a name shown to people and the agent.
fn one_line(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control())
        .take(80)
        .collect::<String>()
}

/// Keeps `images` (name, bytes) with prompt `prompt` of `session`: the PNGs within bounds, up
/// to [`MAX_IMAGES`] and the session's cap; what was left out and why comes back as a note for
/// the asker.
pub async fn attach(
    db: &Db,
    session: SessionId,
    prompt: PromptId,
    images: Vec<(String, Vec<u8>)>,
) -> Result<Vec<String>> {
    let mut left_out = Vec::new();
    let mut kept = Vec::new();
    let mut bodies = Vec::new();
    let now = now_ms();
    let mut total = db::artifacts::context_bytes(db, session).await?;
    for (name, bytes) in images {
        let name = one_line(&name);
        if kept.len() == MAX_IMAGES {
            left_out.push(format!("{name} (at most {MAX_IMAGES} images a message)"));
            continue;
        }
        let Some((width, height)) = png_size(&bytes) else {
            left_out.push(format!("{name} (only PNG images are taken)"));
            continue;
        };
        if bytes.len() > MAX_SCREENSHOT_BYTES
            || width == 0
            || height == 0
            || width > MAX_SCREENSHOT_SIDE
            || height > MAX_SCREENSHOT_SIDE
            || u64::from(width) * u64::from(height) > MAX_SCREENSHOT_PIXELS
        {
            left_out.push(format!(
                "{name} (too large: {width}×{height}, {} bytes)",
                bytes.len()
            ));
            continue;
        }
        if total + bytes.len() as i64 > MAX_CONTEXT_BYTES_PER_SESSION {
            left_out.push(format!("{name} (the session keeps enough images already)"));
            continue;
        }
        total += bytes.len() as i64;
        let info = ArtifactInfo {
            id: ArtifactId(uuid::Uuid::new_v4()),
            session_id: session,
            name: "attached.png".into(),
            content_type: "image/png".into(),
            size: bytes.len() as i64,
            created_at: Timestamp(now),
        };
        kept.push(PromptImage {
            artifact: info.id,
            name,
            width,
            height,
        });
        bodies.push((
            info,
            base64::engine::general_purpose::STANDARD.encode(&bytes),
        ));
    }
    if kept.is_empty() {
        return Ok(left_out);
    }
    let mut tx = db.begin().await?;
    for (info, body) in &bodies {
        db::artifacts::insert(&mut tx, info, body).await?;
        db::events::append(
            &mut tx,
            session,
            now,
            EventKind::Attachment {
                prompt_id: Some(prompt),
                artifact: info.id,
                name: info.name.clone(),
                content_type: info.content_type.clone(),
                size: info.size,
            },
        )
        .await?;
    }
    db::sessions::set_prompt_images(&mut tx, prompt, &kept).await?;
    tx.commit().await?;
    Ok(left_out)
}

/// The file name an image has for the turn.
fn file_name(i: &PromptImage) -> String {
    format!("attached-{}.png", i.artifact)
}

/// `prompt`'s images as the turn's, read from the session's artifacts (one missing is left
/// out: it is named in the text all the same).
pub async fn turn_images(db: &Db, session: SessionId, prompt: &Prompt) -> Vec<TurnImage> {
    let mut out = Vec::new();
    for i in &prompt.images {
        if let Ok(Some((info, body))) = db::artifacts::get(db, session, i.artifact).await {
            out.push(TurnImage {
                name: file_name(i),
                content_type: info.content_type,
                data: body,
            });
        }
    }
    out
}

/// What the agent is told of `prompt`'s images (`files`: where they are, for agents that read
/// them as files).
pub fn note(prompt: &Prompt, files: bool) -> String {
    if prompt.images.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n\nImages that came with this message:\n");
    for i in &prompt.images {
        let name = serde_json::to_string(&i.name).unwrap_or_default();
        if files {
            out.push_str(&format!(
                "- {name} ({}×{} px): {CONTEXT_DIR}/{}\n",
                i.width,
                i.height,
                file_name(i)
            ));
        } else {
            out.push_str(&format!(
                "- {name} ({}×{} px): attached.\n",
                i.width, i.height
            ));
        }
    }
    out
}
