//! What the policy says of one tool: the first matching rule (the repo's, then the
//! installation's), else the tool's own hints — read-only: allow; destructive or open-world:
//! ask; anything else: allow. Missing hints take MCP's defaults (not read-only, destructive,
//! open-world), so a tool that says nothing of itself is asked about.

use tandem_protocol::approval::{ToolAction, ToolHints, ToolRule};

use crate::{Error, Result};

/// Checks a rule's glob when it is saved.
pub fn check_rules(rules: &[ToolRule]) -> Result<()> {
    for r in rules {
        if r.tool.is_empty() || r.tool.len() > 200 || r.tool.chars().any(char::is_control) {
            return Err(Error::Invalid(format!(
                "a rule's tool is a glob of 1 to 200 printable characters, not {:?}",
                r.tool
            )));
        }
        globset::Glob::new(&r.tool)
            .map_err(|e| Error::Invalid(format!("the rule {:?} is not a glob: {e}", r.tool)))?;
    }
    Ok(())
}

fn matches(pattern: &str, tool: &str) -> bool {
    globset::Glob::new(pattern)
        .map(|g| g.compile_matcher().is_match(tool))
        .unwrap_or(false)
}

/// The action for `tool`: `rules` in order (the repo's first), else the hints.
pub fn decide<'a>(
    rules: impl IntoIterator<Item = &'a ToolRule>,
    tool: &str,
    hints: ToolHints,
) -> ToolAction {
    if let Some(rule) = rules.into_iter().find(|r| matches(&r.tool, tool)) {
        return rule.action;
    }
    from_hints(hints)
}

/// The default from a tool's hints alone.
pub fn from_hints(hints: ToolHints) -> ToolAction {
    if hints.read_only == Some(true) {
        return ToolAction::Allow;
    }
    if hints.destructive.unwrap_or(true) || hints.open_world.unwrap_or(true) {
        return ToolAction::Ask;
    }
    ToolAction::Allow
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hints(
        read_only: Option<bool>,
        destructive: Option<bool>,
        open_world: Option<bool>,
    ) -> ToolHints {
        ToolHints {
            read_only,
            destructive,
            open_world,
        }
    }

    #[test]
    fn hints_decide_when_no_rule_matches() {
        assert_eq!(from_hints(hints(Some(true), None, None)), ToolAction::Allow);
        assert_eq!(from_hints(ToolHints::default()), ToolAction::Ask);
        assert_eq!(
            from_hints(hints(Some(false), Some(true), Some(false))),
            ToolAction::Ask
        );
        assert_eq!(
            from_hints(hints(Some(false), Some(false), Some(true))),
            ToolAction::Ask
        );
        assert_eq!(
            from_hints(hints(Some(false), Some(false), Some(false))),
            ToolAction::Allow
        );
    }

    #[test]
    fn the_first_matching_rule_wins_over_hints() {
        let rules = vec![
            ToolRule {
                tool: "get-env".into(),
                action: ToolAction::Deny,
            },
            ToolRule {
                tool: "get-*".into(),
                action: ToolAction::Ask,
            },
            ToolRule {
                tool: "*".into(),
                action: ToolAction::Allow,
            },
        ];
        let ro = hints(Some(true), None, None);
        assert_eq!(decide(&rules, "get-env", ro), ToolAction::Deny);
        assert_eq!(decide(&rules, "get-sum", ro), ToolAction::Ask);
        assert_eq!(
            decide(&rules, "write", ToolHints::default()),
            ToolAction::Allow
        );
        assert_eq!(
            decide(&rules[..1], "echo", ToolHints::default()),
            ToolAction::Ask
        );
        assert_eq!(decide(&rules[..1], "echo", ro), ToolAction::Allow);
    }

    #[test]
    fn bad_globs_are_refused_when_saved() {
        let bad = |t: &str| {
            check_rules(&[ToolRule {
                tool: t.into(),
                action: ToolAction::Allow,
            }])
        };
        assert!(bad("[").is_err());
        assert!(bad("").is_err());
        assert!(bad("a\nb").is_err());
        assert!(bad("delete_*").is_ok());
    }
}
