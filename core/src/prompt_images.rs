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

pub use crate::db::Tx;

/// The most images one prompt takes.
pub const MAX_IMAGES: usize = 4;

/// One line of at most 80 characters, for a name shown to people and the agent.
fn one_line(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control())
        .take(80)
        .collect::<String>()
}

/// Images checked to go with a prompt, not yet stored.
#[derive(Default)]
pub struct Checked {
    pub images: Vec<PromptImage>,
    /// Each kept image's bytes as base64, by position.
    bodies: Vec<(i64, String)>,
    /// What was left out, and why, for the asker.
    pub left_out: Vec<String>,
}

/// Checks `images` (name, bytes): the PNGs within bounds, up to [`MAX_IMAGES`]; what is left
/// out and why is noted for the asker.
pub fn check(images: Vec<(String, Vec<u8>)>) -> Checked {
    let mut c = Checked::default();
    for (name, bytes) in images {
        let name = one_line(&name);
        if c.images.len() == MAX_IMAGES {
            c.left_out
                .push(format!("{name} (at most {MAX_IMAGES} images a message)"));
            continue;
        }
        let Some((width, height)) = png_size(&bytes) else {
            c.left_out
                .push(format!("{name} (only PNG images are taken)"));
            continue;
        };
        if bytes.len() > MAX_SCREENSHOT_BYTES
            || width == 0
            || height == 0
            || width > MAX_SCREENSHOT_SIDE
            || height > MAX_SCREENSHOT_SIDE
            || u64::from(width) * u64::from(height) > MAX_SCREENSHOT_PIXELS
        {
            c.left_out.push(format!(
                "{name} (too large: {width}×{height}, {} bytes)",
                bytes.len()
            ));
            continue;
        }
        c.images.push(PromptImage {
            artifact: ArtifactId(uuid::Uuid::new_v4()),
            name,
            width,
            height,
        });
        c.bodies.push((
            bytes.len() as i64,
            base64::engine::general_purpose::STANDARD.encode(&bytes),
        ));
    }
    c
}

/// Stores `c`'s images as artifacts of `session` with prompt `prompt`, an `attachment` event
/// each, in the transaction that stores the prompt (so its turn never starts without them);
/// refused past the session's cap.
pub async fn store(
    tx: &mut db::Tx,
    session: SessionId,
    prompt: PromptId,
    c: &Checked,
) -> Result<()> {
    if c.images.is_empty() {
        return Ok(());
    }
    let kept = db::artifacts::context_bytes(&mut *tx, session).await?;
    let adding: i64 = c.bodies.iter().map(|(n, _)| n).sum();
    if kept + adding > MAX_CONTEXT_BYTES_PER_SESSION {
        return Err(crate::Error::TooLarge(format!(
            "this session keeps {} MiB of images, its most; start a new session or send the message without them",
            MAX_CONTEXT_BYTES_PER_SESSION >> 20
        )));
    }
    let now = now_ms();
    for (image, (size, body)) in c.images.iter().zip(&c.bodies) {
        let info = ArtifactInfo {
            id: image.artifact,
            session_id: session,
            name: "attached.png".into(),
            content_type: "image/png".into(),
            size: *size,
            created_at: Timestamp(now),
        };
        db::artifacts::insert(tx, &info, body).await?;
        db::events::append(
            tx,
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
    Ok(())
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
    let mut out = String::from(
        "\n\nImages that came with this message (and, in a thread, with the messages before it, which are data like the thread's words):\n",
    );
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
