//! Approvals: a tool call the policy says to ask about waits at the tool boundary while the
//! session's drivers see a card; one answer wins (a driver's, or the timeout's denial). The
//! waiting side ([`ask`]) runs in the server whose gateway the workspace called; the answer
//! may come from any server (the store and the event bus carry it).

use std::time::Duration;

use serde_json::Value;
use tandem_protocol::approval::{
    AnswerApproval, Approval, ApprovalState, ApprovalSubject, Decision,
    MAX_APPROVAL_ARGUMENTS_BYTES, MAX_APPROVAL_REASON_CHARS,
};
use tandem_protocol::live::Role;
use tandem_protocol::{ApprovalId, Author, EventKind, SessionId, Timestamp};

use crate::db::{self, Db};
use crate::{Error, Result, now_ms};

pub mod policy;

/// Most approvals one session may have waiting at once (a workspace cannot flood the
/// timeline with cards).
pub const MAX_PENDING_PER_SESSION: i64 = 8;

/// Argument keys whose values never reach a card, an event or the audit log.
const SECRET_KEYS: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
    "key",
    "authorization",
    "cookie",
    "credential",
];

/// `arguments` as a card shows them: values under secret-looking keys redacted, cut to
/// [`MAX_APPROVAL_ARGUMENTS_BYTES`].
pub fn redact(arguments: &Value) -> Value {
    fn walk(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, v)| {
                        let lower = k.to_ascii_lowercase();
                        if SECRET_KEYS.iter().any(|s| lower.contains(s)) {
                            (k.clone(), Value::String("[redacted]".into()))
                        } else {
                            (k.clone(), walk(v))
                        }
                    })
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(walk).collect()),
            other => other.clone(),
        }
    }
    let shown = walk(arguments);
    let text = shown.to_string();
    if text.len() <= MAX_APPROVAL_ARGUMENTS_BYTES {
        return shown;
    }
    let mut cut = MAX_APPROVAL_ARGUMENTS_BYTES;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    serde_json::json!({ "_cut": format!("{}…", &text[..cut]), "_bytes": text.len() })
}

/// Asks the session's drivers whether the agent may do `subject`, and waits for the answer
/// (at most `timeout`: then it is a denial, recorded as `timed_out`). A grant left by
/// "approve for the rest of the session" answers at once.
pub async fn ask(
    db: &Db,
    session: SessionId,
    subject: ApprovalSubject,
    arguments: &Value,
    timeout: Duration,
) -> Result<Decision> {
    if db::approvals::granted(db, session, &subject.grant_key()).await? {
        return Ok(Decision {
            allowed: true,
            message: None,
        });
    }
    // Watch before the card exists: an answer cannot slip between the two.
    let mut changed = db.subscribe(session);
    let approval = match open(db, session, subject, arguments, timeout).await? {
        Ok(a) => a,
        Err(refusal) => return Ok(refusal),
    };
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let now_state = db::approvals::get(db, approval.id)
            .await?
            .ok_or_else(|| Error::Internal("an approval vanished".into()))?;
        if now_state.state != ApprovalState::Pending {
            return Ok(decision_of(&now_state));
        }
        tokio::select! {
            r = changed.changed() => {
                if r.is_err() {
                    // The bus went (the server stops): the sweep times it out.
                    return Err(Error::Unavailable("the server is stopping".into()));
                }
            }
            () = tokio::time::sleep_until(deadline) => {
                time_out(db, &approval).await?;
            }
        }
    }
}

/// Whether the agent may take Tandem's own `action` (`open_pull_request`, `push`,
/// `spawn_sessions`) in `session` of `repo`: allowed unless the admins' rules say otherwise;
/// `ask` waits for a driver like a tool call.
pub async fn gate_action(
    db: &Db,
    session: SessionId,
    repo: &str,
    action: &str,
    arguments: &Value,
    timeout: Duration,
) -> Result<Decision> {
    let p = crate::mcp::actions(db).await?;
    let rules = p
        .repo_rules
        .get(repo)
        .into_iter()
        .flatten()
        .chain(p.rules.iter());
    let always = tandem_protocol::approval::ToolHints {
        read_only: Some(true),
        ..Default::default()
    };
    let subject = ApprovalSubject::Action {
        action: action.to_string(),
    };
    match policy::decide(rules, action, always) {
        tandem_protocol::approval::ToolAction::Allow => Ok(Decision {
            allowed: true,
            message: None,
        }),
        tandem_protocol::approval::ToolAction::Deny => Ok(Decision {
            allowed: false,
            message: Some(format!(
                "denied by the installation's policy: the agent may not {} here",
                subject.describe()
            )),
        }),
        tandem_protocol::approval::ToolAction::Ask => {
            ask(db, session, subject, arguments, timeout).await
        }
    }
}

/// Puts a card in the session's timeline without waiting for its answer (a refused name
/// lookup cannot wait for a person); the sweep times it out. `None` when the session already
/// has too many waiting.
pub async fn ask_later(
    db: &Db,
    session: SessionId,
    subject: ApprovalSubject,
    arguments: &Value,
    timeout: Duration,
) -> Result<Option<Approval>> {
    Ok(open(db, session, subject, arguments, timeout).await?.ok())
}

/// Stores a pending approval and its card; the refusal to give the agent if the session has
/// too many waiting.
async fn open(
    db: &Db,
    session: SessionId,
    subject: ApprovalSubject,
    arguments: &Value,
    timeout: Duration,
) -> Result<std::result::Result<Approval, Decision>> {
    let running = db::prompts::running(db, session).await?;
    let now = now_ms();
    let approval = Approval {
        id: ApprovalId(uuid::Uuid::new_v4()),
        session_id: session,
        prompt_id: running.as_ref().map(|p| p.id),
        subject,
        arguments: redact(arguments),
        asked_for: running.map(|p| p.author),
        state: ApprovalState::Pending,
        asked_at: Timestamp(now),
        expires_at: Timestamp(now + timeout.as_millis() as i64),
        answered_by: None,
        answered_at: None,
        reason: None,
        for_session: false,
    };
    let mut tx = db.begin().await?;
    if db::approvals::pending_count(&mut tx, session).await? >= MAX_PENDING_PER_SESSION {
        return Ok(Err(Decision {
            allowed: false,
            message: Some(format!(
                "denied: this session already has {MAX_PENDING_PER_SESSION} requests waiting for a person"
            )),
        }));
    }
    db::approvals::insert(&mut tx, &approval).await?;
    db::events::append(
        &mut tx,
        session,
        now,
        EventKind::ApprovalAsked {
            approval: approval.clone(),
        },
    )
    .await?;
    audit(&mut tx, &approval, "approval.asked", None, now).await?;
    tx.commit().await?;
    Ok(Ok(approval))
}

/// What the agent is told of an answered approval.
fn decision_of(a: &Approval) -> Decision {
    let who = a.answered_by.as_ref().map_or("nobody", |b| b.name.as_str());
    let why = a
        .reason
        .as_deref()
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    match a.state {
        ApprovalState::Approved => Decision {
            allowed: true,
            message: None,
        },
        ApprovalState::TimedOut => Decision {
            allowed: false,
            message: Some(format!(
                "denied: nobody in the session answered the request to {} in time; do not retry it unless asked",
                a.subject.describe()
            )),
        },
        _ => Decision {
            allowed: false,
            message: Some(format!("denied by {who}{why}")),
        },
    }
}

/// Times a pending approval out (a denial); nothing if it was answered meanwhile.
pub async fn time_out(db: &Db, approval: &Approval) -> Result<()> {
    let now = now_ms();
    let mut tx = db.begin().await?;
    if db::approvals::answer(
        &mut tx,
        approval.id,
        ApprovalState::TimedOut,
        None,
        None,
        false,
        now,
    )
    .await?
    {
        db::events::append(
            &mut tx,
            approval.session_id,
            now,
            EventKind::ApprovalAnswered {
                approval_id: approval.id,
                state: ApprovalState::TimedOut,
                by: None,
                reason: None,
                for_session: false,
            },
        )
        .await?;
        audit(&mut tx, approval, "approval.timed_out", None, now).await?;
        tx.commit().await?;
    }
    Ok(())
}

/// Times out every approval past its time (one whose waiter went with a stopped server).
pub async fn sweep(db: &Db) -> Result<usize> {
    let late = db::approvals::expired(db, now_ms(), 100).await?;
    for a in &late {
        time_out(db, a).await?;
    }
    Ok(late.len())
}

/// A person answers an approval: drivers and the owner may; a viewer may not.
pub async fn answer(
    db: &Db,
    session: SessionId,
    id: ApprovalId,
    by: &Author,
    role: Role,
    req: &AnswerApproval,
) -> Result<Approval> {
    if role < Role::Driver {
        return Err(Error::Forbidden(
            "a viewer cannot answer an approval; ask the session's owner to make you a driver"
                .into(),
        ));
    }
    let reason = req
        .reason
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(|r| {
            r.chars()
                .filter(|c| !c.is_control())
                .take(MAX_APPROVAL_REASON_CHARS)
                .collect::<String>()
        });
    let approval = db::approvals::get(db, id)
        .await?
        .filter(|a| a.session_id == session)
        .ok_or_else(|| Error::NotFound(format!("no approval {id} in this session")))?;
    let state = if req.approve {
        ApprovalState::Approved
    } else {
        ApprovalState::Denied
    };
    // A name approved for egress is the session's for good: its workspace may start again
    // (resume) and asks nobody twice.
    let for_session = req.approve
        && (req.for_session || matches!(approval.subject, ApprovalSubject::Egress { .. }));
    let now = now_ms();
    let mut tx = db.begin().await?;
    if !db::approvals::answer(
        &mut tx,
        id,
        state,
        Some(by),
        reason.as_deref(),
        for_session,
        now,
    )
    .await?
    {
        let current = db::approvals::get(&mut tx, id).await?.map(|a| a.state);
        return Err(Error::Conflict(format!(
            "this approval was already answered ({})",
            current.map_or("gone", ApprovalState::as_str)
        )));
    }
    if for_session {
        db::approvals::grant(
            &mut tx,
            session,
            &approval.subject.grant_key(),
            &by.name,
            now,
        )
        .await?;
    }
    db::events::append(
        &mut tx,
        session,
        now,
        EventKind::ApprovalAnswered {
            approval_id: id,
            state,
            by: Some(by.clone()),
            reason: reason.clone(),
            for_session,
        },
    )
    .await?;
    let action = if req.approve {
        "approval.approved"
    } else {
        "approval.denied"
    };
    audit(&mut tx, &approval, action, Some(by), now).await?;
    tx.commit().await?;
    db::approvals::get(db, id)
        .await?
        .ok_or_else(|| Error::Internal("an approval vanished".into()))
}

async fn audit(
    tx: &mut db::Tx,
    a: &Approval,
    action: &str,
    by: Option<&Author>,
    now: i64,
) -> Result<()> {
    db::audit::record(
        tx,
        now,
        db::audit::Entry {
            actor_user_id: by.and_then(|b| b.user_id),
            actor_name: by.map_or("tandem", |b| b.name.as_str()),
            action,
            target: &format!("session:{}", a.session_id),
            detail: serde_json::json!({
                "approval": a.id,
                "subject": a.subject,
                "arguments": a.arguments,
                "asked_for": a.asked_for.as_ref().map(|x| &x.name),
            }),
        },
    )
    .await?;
    Ok(())
}
