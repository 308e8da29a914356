//! The `command` agent: any CLI agent from a template (`claude -p {prompt}`,
//! `aider --message {prompt}`), run in the checkout with the gateway as its OpenAI endpoint.
//! Its standard output is the agent's reply, streamed.

use std::time::{Duration, Instant};

use tandem_protocol::agent::{GATEWAY_LOOPBACK, MAX_TOOL_OUTPUT_BYTES, TurnFrame, TurnStart};
use tandem_protocol::{TurnOutcome, Usage};

use super::changes::Snapshot;
use super::{Ctx, Ending, process};

/// A command agent's turn may run this long.
const TURN_TIMEOUT: Duration = Duration::from_secs(2 * 3600);

/// `s` as one single-quoted shell word.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The environment every CLI agent gets: the gateway as an OpenAI-compatible endpoint (the key
/// is the gateway's business; this one is a placeholder), and the prompt.
pub fn agent_env(start: &TurnStart) -> Vec<(String, String)> {
    vec![
        (
            "OPENAI_BASE_URL".into(),
            format!("http://{GATEWAY_LOOPBACK}/v1"),
        ),
        (
            "OPENAI_API_BASE".into(),
            format!("http://{GATEWAY_LOOPBACK}/v1"),
        ),
        ("OPENAI_API_KEY".into(), "tandem-gateway".into()),
        ("TANDEM_MODEL".into(), start.model.clone()),
        ("TANDEM_PROMPT".into(), start.prompt.clone()),
    ]
}

pub async fn run(ctx: &Ctx, template: &str, start: &TurnStart) -> Ending {
    let script = template.replace("{prompt}", &shell_quote(&start.prompt));
    run_script(ctx, &script, &agent_env(start)).await
}

/// Runs `script`, its stdout streamed as the reply; shared with the opencode adapter.
pub async fn run_script(ctx: &Ctx, script: &str, env: &[(String, String)]) -> Ending {
    let before = Snapshot::take(&ctx.root).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let work = process::run(
        &ctx.root,
        script,
        env,
        Some(TURN_TIMEOUT),
        MAX_TOOL_OUTPUT_BYTES,
        &ctx.cancel,
        move |t| {
            let _ = tx.send(t.to_string());
        },
    );
    tokio::pin!(work);
    let mut last = Instant::now();
    let mut pending = String::new();
    let finished = loop {
        tokio::select! {
            f = &mut work => break f,
            Some(t) = rx.recv() => {
                pending.push_str(&t);
                if last.elapsed() >= Duration::from_millis(50) {
                    ctx.send(TurnFrame::Delta { text: std::mem::take(&mut pending) }).await;
                    last = Instant::now();
                }
            }
        }
    };
    while let Ok(t) = rx.try_recv() {
        pending.push_str(&t);
    }
    if !pending.is_empty() {
        ctx.send(TurnFrame::Delta { text: pending }).await;
    }
    for (path, change) in before.diff(&Snapshot::take(&ctx.root).await) {
        ctx.send(TurnFrame::FileChanged { path, change }).await;
    }
    let f = match finished {
        Ok(f) => f,
        Err(e) => return Ending::new(TurnOutcome::Failed, Usage::default(), Some(e)),
    };
    if !f.stdout.trim().is_empty() {
        ctx.send(TurnFrame::Message {
            text: f.stdout.trim_end().to_string(),
        })
        .await;
    }
    if f.cancelled {
        return Ending::new(TurnOutcome::Stopped, Usage::default(), None);
    }
    match f.code {
        Some(0) => Ending::new(TurnOutcome::Completed, Usage::default(), None),
        code => {
            let tail: String = f
                .stderr
                .chars()
                .rev()
                .take(2000)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            let how = if f.timed_out {
                "timed out".to_string()
            } else {
                format!("exited with {code:?}")
            };
            Ending::new(
                TurnOutcome::Failed,
                Usage::default(),
                Some(format!("the agent command {how}: {}", tail.trim())),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn quoting_survives_quotes() {
        assert_eq!(super::shell_quote("it's"), "'it'\\''s'");
    }
}
