//! The `opencode` agent: `opencode run` with the prompt, its provider pointed at the gateway.
//! Placeholder until the adapter is finished.

use tandem_protocol::agent::TurnStart;

use super::{Ctx, Ending, command};

pub async fn run(ctx: &Ctx, start: &TurnStart) -> Ending {
    let script = format!("opencode run -m tandem/{} {}", command::shell_quote(&start.model), command::shell_quote(&start.prompt));
    command::run_script(ctx, &script, &command::agent_env(start)).await
}
