//! The pull request's body: the session's story from its events (prompts, what changed, the
//! commands run and the tests among them), bounded to what GitHub takes. Its images are Tandem's
//! own signed screenshot links only: a remote image the agent or a prompt wrote is a plain link
//! (`tandem_protocol::links`), so GitHub's image proxy fetches nothing a workspace chose.

use super::*;

/// Whether a command runs tests (what reviewers want to see the result of).
pub fn is_test_command(cmd: &str) -> bool {
    let c = cmd.to_lowercase();
    [
        "test", "pytest", "jest", "vitest", "rspec", "mocha", "ctest", "check",
    ]
    .iter()
    .any(|w| c.contains(w))
}

/// The pull request body: summary, prompts and their authors, tests run with their results,
/// screenshots, and the way back to the session; no image but Tandem's own.
pub async fn body(app: &AppState, session: SessionId) -> Result<String> {
    let detail = crate::sessions::get(&app.db, session).await?;
    let events = all_events(app, session).await?;
    let public = app.public_url();
    let mut md = String::new();
    // A session started from an issue closes it when merged.
    if let Some((number, _)) = crate::db::issues::of_session(&app.db, session).await? {
        md.push_str(&format!("Fixes #{number}\n\n"));
    }

    md.push_str("## Summary\n\n");
    let summary = events.iter().rev().find_map(|e| match &e.kind {
        EventKind::AgentMessage { text, .. } if !text.trim().is_empty() => {
            Some(text.trim().to_string())
        }
        _ => None,
    });
    md.push_str(&cut(
        &summary.unwrap_or_else(|| "The agent left no summary.".into()),
        4000,
    ));
    md.push_str("\n\n## Prompts\n\n");
    for (i, p) in detail.prompts.iter().enumerate() {
        let text = cut(&p.text.replace('\n', " "), 600);
        md.push_str(&format!(
            "{}. **{}** ({}): {text}\n",
            i + 1,
            p.author.name,
            p.state.as_str()
        ));
    }

    md.push_str("\n## Tests run\n\n");
    let mut tests = Vec::new();
    for (i, e) in events.iter().enumerate() {
        match &e.kind {
            EventKind::ToolCall {
                call_id,
                name,
                arguments,
                ..
            } => {
                let Some(cmd) = arguments.get("command").and_then(|c| c.as_str()) else {
                    continue;
                };
                if !is_test_command(cmd) {
                    continue;
                }
                // The first result after the call with its id (ids repeat across model replies).
                let result = events[i..].iter().find_map(|r| match &r.kind {
                    EventKind::ToolResult {
                        call_id: c,
                        exit_code,
                        duration_ms,
                        ..
                    } if c == call_id => Some((*exit_code, *duration_ms)),
                    _ => None,
                });
                tests.push((format!("{cmd} ({name}, agent)"), result));
            }
            EventKind::CommandRun {
                author,
                command,
                exit_code,
                duration_ms,
                ..
            } if is_test_command(command) => {
                tests.push((
                    format!("{command} ({})", author.name),
                    Some((*exit_code, *duration_ms)),
                ));
            }
            _ => {}
        }
    }
    if tests.is_empty() {
        md.push_str("No test commands ran in this session.\n");
    } else {
        md.push_str("| Command | Result |\n|---|---|\n");
        for (cmd, result) in tests.iter().rev().take(30).rev() {
            let verdict = match result {
                Some((Some(0), ms)) => format!("✅ passed ({ms} ms)"),
                Some((Some(c), ms)) => format!("❌ exit {c} ({ms} ms)"),
                Some((None, ms)) => format!("⏱ killed ({ms} ms)"),
                None => "no result".to_string(),
            };
            md.push_str(&format!(
                "| `{}` | {verdict} |\n",
                cut(&cmd.replace('|', "\\|").replace('`', "'"), 200)
            ));
        }
    }

    let shots: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Attachment {
                artifact,
                name,
                content_type,
                ..
            } if content_type.starts_with("image/") => {
                Some((name.clone(), super::super::artifact_link(app, *artifact)))
            }
            _ => None,
        })
        .collect();
    md.push_str("\n## Screenshots\n\n");
    if shots.is_empty() {
        md.push_str("No screenshots were taken in this session.\n");
    } else {
        // Before and after: the first and the last, and up to four in between.
        let picked: Vec<_> = if shots.len() <= 6 {
            shots.iter().collect()
        } else {
            shots
                .iter()
                .take(3)
                .chain(shots.iter().skip(shots.len() - 3))
                .collect()
        };
        for (name, link) in picked {
            md.push_str(&format!("![{}]({link})\n", name.replace(['[', ']'], "")));
        }
    }
    md.push_str(&format!(
        "\n---\nOpened from Tandem session [{}]({public}/sessions/{session}).\n",
        cut(&detail.session.title, 120)
    ));
    Ok(tandem_protocol::links::without_remote_images_within(
        &md,
        &public,
        MAX_BODY_CHARS,
    ))
}

pub(super) fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(max).collect::<String>())
    }
}
