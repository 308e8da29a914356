//! Fuzzes the workspace agent's streamed turn frames as the server parses them (the agent runs
//! in the workspace, so every byte it streams may be hostile): each newline-delimited line of
//! `POST /turns` is `serde_json::from_slice::<TurnFrame>`, as the agent client's NDJSON reader
//! does, and a delta's text is cut by `truncate` before it is stored.
//! Nothing may panic or exhaust the stack; a frame that parses says the same when encoded again,
//! on one line; cut text stays within its bound.

use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::Value;
use tandem_protocol::agent::TurnFrame;
use tandem_protocol::{FileChange, PromptId, TurnOutcome, Usage};

use crate::fuzz_support::{config, json, mutate, mutations, nested, same_json, tagged};
use crate::sessions::workspace::truncate;

/// Tags and field names of `TurnFrame`.
const WORDS: &[&str] = &[
    "type",
    "delta",
    "message",
    "tool_call",
    "tool_result",
    "file_changed",
    "steered",
    "state",
    "end",
    "stdout",
    "stderr",
    "exit",
    "text",
    "call_id",
    "name",
    "arguments",
    "output",
    "is_error",
    "exit_code",
    "duration_ms",
    "path",
    "change",
    "created",
    "modified",
    "deleted",
    "prompt_id",
    "outcome",
    "completed",
    "stopped",
    "failed",
    "interrupted",
    "usage",
    "prompt_tokens",
    "completion_tokens",
    "requests",
    "error",
    "undelivered",
    "data",
    "code",
    "timed_out",
    "0b6e6a5e-8f0c-4a8e-9c55-1f7a1c1d2e3f",
];

fn prompt_id() -> impl Strategy<Value = PromptId> {
    any::<u128>().prop_map(|n| PromptId(uuid::Uuid::from_u128(n)))
}

fn usage() -> impl Strategy<Value = Usage> {
    any::<[i64; 3]>().prop_map(|[prompt_tokens, completion_tokens, requests]| Usage {
        prompt_tokens,
        completion_tokens,
        requests,
    })
}

/// Every kind of valid turn frame.
fn turn_frame() -> impl Strategy<Value = TurnFrame> {
    prop_oneof![
        any::<String>().prop_map(|text| TurnFrame::Delta { text }),
        any::<String>().prop_map(|text| TurnFrame::Message { text }),
        (any::<String>(), any::<String>(), json(WORDS)).prop_map(|(call_id, name, arguments)| {
            TurnFrame::ToolCall {
                call_id,
                name,
                arguments,
            }
        }),
        (
            any::<String>(),
            any::<String>(),
            any::<String>(),
            any::<bool>(),
            proptest::option::of(any::<i32>()),
            any::<i64>()
        )
            .prop_map(
                |(call_id, name, output, is_error, exit_code, duration_ms)| {
                    TurnFrame::ToolResult {
                        call_id,
                        name,
                        output,
                        is_error,
                        exit_code,
                        duration_ms,
                    }
                }
            ),
        (
            any::<String>(),
            proptest::sample::select(vec![
                FileChange::Created,
                FileChange::Modified,
                FileChange::Deleted
            ])
        )
            .prop_map(|(path, change)| TurnFrame::FileChanged { path, change }),
        prompt_id().prop_map(|prompt_id| TurnFrame::Steered { prompt_id }),
        json(WORDS).prop_map(|state| TurnFrame::State { state }),
        (
            proptest::sample::select(vec![
                TurnOutcome::Completed,
                TurnOutcome::Stopped,
                TurnOutcome::Failed,
                TurnOutcome::Interrupted
            ]),
            usage(),
            proptest::option::of(any::<String>()),
            vec(prompt_id(), 0..3)
        )
            .prop_map(|(outcome, usage, error, undelivered)| TurnFrame::End {
                outcome,
                usage,
                error,
                undelivered,
            }),
    ]
}

/// One line as the server reads it (newline included, as `start_turn` passes it): no panic;
/// a frame that parses encodes again on one line (NDJSON: the agent's encoder and the server's
/// line splitting rely on it) and parses back to the same frame.
fn check_line<T>(line: &[u8])
where
    T: serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let Ok(frame) = serde_json::from_slice::<T>(line) else {
        return;
    };
    let again = serde_json::to_vec(&frame).expect("a parsed frame encodes");
    assert!(
        !again.contains(&b'\n'),
        "{frame:?} encodes over more than one line"
    );
    let mut with_nl = again.clone();
    with_nl.push(b'\n');
    let back: T = serde_json::from_slice(&with_nl).unwrap_or_else(|e| {
        panic!(
            "{} does not parse back: {e}",
            String::from_utf8_lossy(&again)
        )
    });
    let (a, b): (Value, Value) = (
        serde_json::to_value(&frame).unwrap(),
        serde_json::to_value(&back).unwrap(),
    );
    assert!(same_json(&a, &b), "{a} became {b}");
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn turn_lines_of_any_bytes_never_panic(mut line in vec(any::<u8>(), 0..256)) {
        line.push(b'\n');
        check_line::<TurnFrame>(&line);
    }

    #[test]
    fn turn_lines_of_random_frames_never_panic(v in tagged("type", WORDS)) {
        let mut line = serde_json::to_vec(&v).unwrap();
        line.push(b'\n');
        check_line::<TurnFrame>(&line);
    }

    #[test]
    fn valid_turn_frames_round_trip_on_one_line(f in turn_frame(), crlf in any::<bool>()) {
        let mut line = serde_json::to_vec(&f).unwrap();
        prop_assert!(!line.contains(&b'\n'));
        line.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
        let back: TurnFrame = serde_json::from_slice(&line)
            .map_err(|e| TestCaseError::fail(format!("{}: {e}", String::from_utf8_lossy(&line))))?;
        let (a, b) = (serde_json::to_value(&f).unwrap(), serde_json::to_value(&back).unwrap());
        prop_assert!(same_json(&a, &b), "{} became {}", a, b);
    }

    #[test]
    fn mutated_turn_frames_never_panic(f in turn_frame(), muts in mutations()) {
        let mut line = mutate(&serde_json::to_vec(&f).unwrap(), &muts);
        line.push(b'\n');
        check_line::<TurnFrame>(&line);
    }

    /// The cut a delta's text gets: at most `max` bytes, a prefix, on a character boundary,
    /// and no shorter than it has to be.
    #[test]
    fn truncate_cuts_on_a_char_boundary_within_the_bound(s in any::<String>(), max in 0usize..64) {
        let mut cut = s.clone();
        let did = truncate(&mut cut, max);
        prop_assert_eq!(did, s.len() > max);
        prop_assert!(s.starts_with(&cut));
        if did {
            prop_assert!(cut.len() <= max);
            prop_assert!(cut.len() + 4 > max, "cut {} bytes for a bound of {}", cut.len(), max);
        } else {
            prop_assert_eq!(&cut, &s);
        }
    }
}

#[test]
fn deeply_nested_frames_are_refused_without_exhausting_the_stack() {
    // An agent may stream megabytes on one line (`MAX_ANSWER_BYTES`): nesting is refused by
    // depth long before that, on a stack no larger than a tokio worker's.
    let depth = 1 << 20;
    let lines = [
        nested(depth),
        format!(r#"{{"type":"state","state":{}}}"#, nested(depth)),
        format!(
            r#"{{"type":"tool_call","call_id":"c","name":"n","arguments":{}}}"#,
            nested(depth)
        ),
        format!(r#"{{"type":"state","state":{}}}"#, "{\"a\":".repeat(depth)),
    ];
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            for line in lines {
                assert!(serde_json::from_str::<TurnFrame>(&line).is_err());
            }
        })
        .unwrap()
        .join()
        .unwrap();
}
